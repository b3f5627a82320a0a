# Copyright (c) OpenMMLab. All rights reserved.
# Excerpt of lmdeploy 0.18.0 (Apache-2.0), reduced.
import torch
from torch import nn


class Attention(nn.Module):
    """Attention layer."""

    def __init__(self, num_heads: int, head_size: int, alibi: bool = False, **kwargs):
        super().__init__()
        self.num_heads = num_heads
        self.head_size = head_size
        self.alibi = alibi
        self.alibi_ready = not alibi
        self.alibi_slopes = None

    def _lazy_init(self, device):
        """Lazy init."""
        if not self.alibi_ready:
            slopes = 2.0 ** (-8.0 * torch.arange(1, self.num_heads + 1, device=device) / self.num_heads)
            self.alibi_slopes = slopes.float()
            self.alibi_ready = True

    def forward(self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor) -> torch.Tensor:
        """forward."""
        self._lazy_init(query.device)
        return torch.nn.functional.scaled_dot_product_attention(query, key, value, is_causal=True)
