# Copyright (c) OpenMMLab. All rights reserved.
# Excerpt of lmdeploy 0.18.0 (Apache-2.0), reduced.
import torch
from torch import nn

from lmdeploy.pytorch.nn.attention import Attention


class LlamaAttention(nn.Module):
    """Rewrite module of LlamaAttention."""

    def __init__(self, hidden_size: int, num_heads: int):
        super().__init__()
        self.qkv_proj = nn.Linear(hidden_size, 3 * hidden_size)
        self.attn_fwd = Attention(num_heads, hidden_size // num_heads)
        self.o_proj = nn.Linear(hidden_size, hidden_size)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        """Rewrite of LlamaAttention.forward."""
        query_states, key_states, value_states = self.qkv_proj(hidden_states).chunk(3, dim=-1)
        attn_output = self.attn_fwd(query_states, key_states, value_states)
        return self.o_proj(attn_output)
