# Copyright (c) 2022-2026, NVIDIA CORPORATION & AFFILIATES. All rights reserved.
#
# See LICENSE for license information.
# Excerpt of transformer-engine 2.20.2 (transformer_engine/pytorch), reduced.
from typing import Any, Dict, List, Optional

import torch

from transformer_engine.pytorch.attention.softmax import FusedScaleMaskSoftmax
from transformer_engine.pytorch.distributed import checkpoint

_alibi_cache = {
    "_num_heads": None,
    "_alibi_slopes": None,
    "_max_seqlen_q": None,
    "_max_seqlen_kv": None,
    "_alibi_slopes_require_update": False,
    "_alibi_bias_require_update": False,
}


class DotProductAttention(torch.nn.Module):
    """Allows the model to jointly attend to information from different representation subspaces."""

    def __init__(self, layer_number=1):
        super().__init__()
        self.layer_number = layer_number
        self.scale_mask_softmax = FusedScaleMaskSoftmax()

    def _checkpointed_attention_forward(self, attention_func, *forward_args, **forward_kwargs):
        """Forward method with activation checkpointing."""

        def custom_forward(*input_args, **input_kwargs):
            return attention_func(*input_args, **input_kwargs)

        hidden_states = checkpoint(custom_forward, *forward_args, **forward_kwargs)
        return hidden_states

    def _selected_thd_token_mask(self, total_tokens, cu_seqlens, sequence_ids):
        token_ids = torch.arange(total_tokens, device=cu_seqlens.device)
        starts, ends = cu_seqlens[sequence_ids], cu_seqlens[sequence_ids + 1]
        return ((token_ids[None] >= starts[:, None]) & (token_ids[None] < ends[:, None])).any(0)

    def _forward_thd_mask_types_grouped(self, query_layer, key_layer, value_layer, cu_seqlens_q, cu_seqlens_kv, policies):
        """Dispatch mixed THD policies by compacting each policy's tokens."""
        output = query_layer.new_zeros(query_layer.shape)
        for policy in policies:
            sequence_ids = policy["sequence_ids"]
            q_token_mask = self._selected_thd_token_mask(query_layer.shape[0], cu_seqlens_q, sequence_ids)
            kv_token_mask = self._selected_thd_token_mask(key_layer.shape[0], cu_seqlens_kv, sequence_ids)
            q_token_indices = torch.nonzero(q_token_mask, as_tuple=False).flatten()
            kv_token_indices = torch.nonzero(kv_token_mask, as_tuple=False).flatten()
            policy_output = self.unfused_attention(
                query_layer[q_token_indices], key_layer[kv_token_indices], value_layer[kv_token_indices],
                attn_mask_type=policy["mask_type"],
            )
            output = output.index_copy(0, q_token_indices, policy_output)
        return output

    def unfused_attention(
        self,
        query_layer: torch.Tensor,
        key_layer: torch.Tensor,
        value_layer: torch.Tensor,
        attn_mask_type: str = "causal",
    ) -> torch.Tensor:
        """Unfused attention fprop"""
        scores = torch.matmul(query_layer, key_layer.transpose(-2, -1))
        probs = self.scale_mask_softmax(scores, None, attn_mask_type)
        return torch.matmul(probs, value_layer)

    def forward(
        self,
        query_layer: Optional[torch.Tensor] = None,
        key_layer: Optional[torch.Tensor] = None,
        value_layer: Optional[torch.Tensor] = None,
        cu_seqlens_q: Optional[torch.Tensor] = None,
        cu_seqlens_kv: Optional[torch.Tensor] = None,
        max_seqlen_q: int = None,
        max_seqlen_kv: int = None,
        attn_mask_type: Optional[str] = None,
        thd_attention_policies: Optional[List[Dict[str, Any]]] = None,
        checkpoint_core_attention: bool = False,
        core_attention_bias_type: str = "no_bias",
        alibi_slopes: Optional[torch.Tensor] = None,
    ) -> torch.Tensor:
        """Dot Product Attention Layer."""
        if thd_attention_policies is not None:
            return self._forward_thd_mask_types_grouped(
                query_layer, key_layer, value_layer, cu_seqlens_q, cu_seqlens_kv, thd_attention_policies
            )

        # set ALiBi attributes
        global _alibi_cache
        if alibi_slopes is not None:
            if self.layer_number == 1:
                _alibi_cache["_alibi_slopes_require_update"] = True
                _alibi_cache["_alibi_bias_require_update"] = True
        if core_attention_bias_type == "alibi":
            if (
                _alibi_cache["_num_heads"] != query_layer.shape[-2]
                or _alibi_cache["_max_seqlen_q"] != max_seqlen_q
                or _alibi_cache["_max_seqlen_kv"] != max_seqlen_kv
                or _alibi_cache["_alibi_slopes"] is None
            ):
                _alibi_cache["_alibi_slopes_require_update"] = True
                _alibi_cache["_alibi_bias_require_update"] = True

        if checkpoint_core_attention:
            return self._checkpointed_attention_forward(
                self.unfused_attention, query_layer, key_layer, value_layer, attn_mask_type=attn_mask_type
            )
        return self.unfused_attention(
            query_layer, key_layer, value_layer, attn_mask_type=attn_mask_type
        )
