# Copyright (c) 2023, NVIDIA CORPORATION. All rights reserved.
# Excerpt of megatron-core 0.16.1, reduced.
import torch
import torch.nn.functional as F

from megatron.core.fusions.fused_bias_geglu import weighted_bias_quick_geglu_impl
from megatron.core.utils import nvtx_range_push


def quick_gelu(x):
    return x * torch.sigmoid(1.702 * x)


class MLP(torch.nn.Module):
    """MLP: h -> 4h, nonlinearity, 4h -> h."""

    def __init__(self, config):
        super().__init__()
        self.config = config
        self.activation_func = config.activation_func
        self.linear_fc1 = torch.nn.Linear(config.hidden_size, 2 * config.ffn_hidden_size)
        self.linear_fc2 = torch.nn.Linear(config.ffn_hidden_size, config.hidden_size)

    def forward(self, hidden_states, per_token_scale=None):
        """Perform the forward pass through the MLP block."""
        nvtx_range_push(suffix="linear_fc1")
        intermediate_parallel = self.linear_fc1(hidden_states)
        bias_parallel = None
        if self.config.bias_activation_fusion:
            if per_token_scale is not None:
                if self.activation_func == quick_gelu and self.config.gated_linear_unit:
                    intermediate_parallel = weighted_bias_quick_geglu_impl(
                        intermediate_parallel,
                        bias_parallel,
                        per_token_scale.unsqueeze(-1),
                        self.config.activation_func_fp8_input_store,
                        self.config.glu_linear_offset,
                        self.config.activation_func_clamp_value,
                    )
        else:
            intermediate_parallel = F.silu(intermediate_parallel)
        return self.linear_fc2(intermediate_parallel)
