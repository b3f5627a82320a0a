import torch
import torch.nn as nn
import torch.nn.functional as F

from ..lora.layers import ColumnParallelLinearWithLoRA
from ..lora.lora_manager import LoRAManager


class TinyLoRAModel(nn.Module):
    def __init__(self, vocab_size: int, hidden_size: int, lora_manager: LoRAManager):
        super().__init__()
        self.embed_tokens = nn.Embedding(vocab_size, hidden_size)
        self.qkv_proj = ColumnParallelLinearWithLoRA(nn.Linear(hidden_size, hidden_size), lora_manager)
        self.norm = nn.LayerNorm(hidden_size)
        self.lm_head = nn.Linear(hidden_size, vocab_size, bias=False)

    def set_lora_info(self, weight_indices):
        self.qkv_proj.set_lora_info(weight_indices)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        h = self.embed_tokens(input_ids)
        h = h + F.gelu(self.qkv_proj(h))
        return self.lm_head(self.norm(h)).mean(1)
