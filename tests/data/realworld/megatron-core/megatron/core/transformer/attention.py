# Copyright (c) 2025 NVIDIA CORPORATION & AFFILIATES. All rights reserved.
# Excerpt of megatron-core 0.16.1, reduced.
from enum import Enum

import torch

from megatron.core import tensor_parallel
from megatron.core.utils import is_te_min_version


class AttnMaskType(Enum):
    padding = 1
    causal = 2


class Attention(torch.nn.Module):
    """Attention layer abstract class."""

    def __init__(self, config, core_attention, attn_mask_type=AttnMaskType.causal):
        super().__init__()
        self.config = config
        self.core_attention = core_attention
        self.attn_mask_type = attn_mask_type
        self.checkpoint_core_attention = config.recompute_granularity == "selective"

    def _checkpointed_attention_forward(
        self,
        query,
        key,
        value,
        attention_mask,
        rotary_pos_emb=None,
        attn_mask_type=None,
    ):
        """Forward method with selective activation checkpointing."""

        def custom_forward(*inputs):
            query = inputs[0]
            key = inputs[1]
            value = inputs[2]
            attention_mask = inputs[3]
            attn_mask_type = inputs[5]
            attn_mask_type = AttnMaskType(attn_mask_type.item())
            output_ = self.core_attention(
                query, key, value, attention_mask, attn_mask_type=attn_mask_type
            )
            return output_

        if attn_mask_type is None:
            attn_mask_type = self.attn_mask_type
        attn_mask_type = torch.tensor([attn_mask_type.value], dtype=torch.int)
        hidden_states = tensor_parallel.checkpoint(
            custom_forward, False, query, key, value, attention_mask, rotary_pos_emb, attn_mask_type
        )
        return hidden_states

    def forward(self, query, key, value, attention_mask, attn_mask_type=None):
        """Perform a forward pass through the attention module."""
        if is_te_min_version("2.2.0"):
            query = query.contiguous()
        if self.checkpoint_core_attention and self.training:
            return self._checkpointed_attention_forward(
                query, key, value, attention_mask, attn_mask_type=attn_mask_type
            )
        return self.core_attention(query, key, value, attention_mask, attn_mask_type=attn_mask_type)
