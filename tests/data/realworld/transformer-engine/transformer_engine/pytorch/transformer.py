# Copyright (c) 2022-2026, NVIDIA CORPORATION & AFFILIATES. All rights reserved.
#
# See LICENSE for license information.
# Excerpt of transformer-engine 2.20.2 (transformer_engine/pytorch), reduced.
import torch

from transformer_engine.pytorch.attention.dot_product_attention import DotProductAttention
from transformer_engine.pytorch.utils import nvtx_range_pop, nvtx_range_push, warn_if_compile_disabled


class TransformerLayer(torch.nn.Module):
    """TransformerLayer is made up of an attention block and a feedforward network (MLP)."""

    def __init__(self, hidden_size, layer_number=1):
        super().__init__()
        self.qkv = torch.nn.Linear(hidden_size, 3 * hidden_size)
        self.core_attention = DotProductAttention(layer_number=layer_number)

    def forward(
        self,
        hidden_states,
        attn_mask_type=None,
        thd_attention_policies=None,
        checkpoint_core_attention=False,
        core_attention_bias_type="no_bias",
        alibi_slopes=None,
    ):
        """Transformer Layer: attention block and a feedforward network (MLP)"""
        warn_if_compile_disabled()
        nvtx_range_push(self.__class__.__name__ + " forward")
        query, key, value = self.qkv(hidden_states).chunk(3, dim=-1)
        context = self.core_attention(
            query,
            key,
            value,
            attn_mask_type=attn_mask_type,
            thd_attention_policies=thd_attention_policies,
            checkpoint_core_attention=checkpoint_core_attention,
            core_attention_bias_type=core_attention_bias_type,
            alibi_slopes=alibi_slopes,
        )
        nvtx_range_pop()
        return context
