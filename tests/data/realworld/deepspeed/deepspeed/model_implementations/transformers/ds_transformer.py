# Copyright (c) Microsoft Corporation.
# SPDX-License-Identifier: Apache-2.0

# DeepSpeed Team
# Excerpt of deepspeed 0.19.8, reduced.
import torch
import torch.nn as nn

from deepspeed import comm as dist


class DeepSpeedTransformerInference(nn.Module):
    """Initialize the DeepSpeed Transformer Layer."""

    layer_id = 0
    workspace = None

    def __init__(self, config):
        super().__init__()
        self.config = config
        self.config.layer_id = DeepSpeedTransformerInference.layer_id
        DeepSpeedTransformerInference.layer_id += 1
        self.attention = nn.MultiheadAttention(config.hidden_size, config.heads, batch_first=True)
        self._should_allocate_workspace = True

    def allocate_workspace(self, size):
        # Allocate memory only on first layer forward
        if self.config.layer_id == 0 and self._should_allocate_workspace:
            DeepSpeedTransformerInference.workspace = torch.empty(
                size[0], size[1], self.config.hidden_size, device="cuda"
            )
            rank = dist.get_rank() if dist.is_initialized() else 0
            self._should_allocate_workspace = False

    def forward(self, input=None, input_mask=None, attention_mask=None, **kwargs):
        self.allocate_workspace(input.size())
        output, _ = self.attention(input, input, input, need_weights=False)
        return output + input
