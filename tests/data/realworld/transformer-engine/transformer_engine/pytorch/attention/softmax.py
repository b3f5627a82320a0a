# Copyright (c) 2022-2026, NVIDIA CORPORATION & AFFILIATES. All rights reserved.
#
# See LICENSE for license information.
# Excerpt of transformer-engine 2.20.2 (transformer_engine/pytorch), reduced.
from typing import Optional

import torch

_default_causal_mask = {}


def _get_default_causal_mask(mask_type: str, sq: int, sk: int) -> torch.Tensor:
    """Return the causal upper triangular mask for softmax input"""

    def _get_mask():
        diagonal_offset = sk - sq + 1 if "bottom_right" in mask_type else 1
        return torch.triu(torch.ones(sq, sk, dtype=torch.bool, device="cuda"), diagonal=diagonal_offset)

    matrix_identifiers = (mask_type, sq, sk)
    if matrix_identifiers not in _default_causal_mask:
        _default_causal_mask[matrix_identifiers] = _get_mask()
    return _default_causal_mask[matrix_identifiers]


class FusedScaleMaskSoftmax(torch.nn.Module):
    """fused operation: scaling + mask + softmax"""

    def __init__(self, softmax_in_fp32=True):
        super().__init__()
        self.softmax_in_fp32 = softmax_in_fp32
        self.attn_mask_type = None

    def forward(
        self,
        inp: torch.Tensor,
        mask: torch.Tensor,
        attn_mask_type: str,
        scale: Optional[float] = None,
    ) -> torch.Tensor:
        """FusedScaleMaskSoftmax fprop"""
        assert inp.dim() == 4
        self.attn_mask_type = attn_mask_type
        return self.forward_torch_softmax(inp, mask, scale)

    def forward_torch_softmax(
        self, inp: torch.Tensor, mask: torch.Tensor, scale: Optional[float] = None
    ) -> torch.Tensor:
        """Framework softmax"""
        if scale is not None:
            inp = inp * scale
        if self.attn_mask_type in ["causal", "causal_bottom_right"]:
            seq_len_q, seq_len_k = inp.size(2), inp.size(3)
            causal_mask = _get_default_causal_mask(self.attn_mask_type, seq_len_q, seq_len_k)
            mask = causal_mask if mask is None else torch.logical_or(mask, causal_mask)
        if mask is not None:
            inp = inp.masked_fill(mask, -10000.0)
        return torch.nn.Softmax(dim=-1)(inp)
