import torch
import torch.nn as nn

from .lora_manager import LoRAManager


class ColumnParallelLinearWithLoRA(nn.Module):
    def __init__(self, base_layer: nn.Linear, lora_manager: LoRAManager):
        super().__init__()
        self.base_layer = base_layer
        self.lora_manager = lora_manager
        self.weight_indices = None

    def set_lora_info(self, weight_indices: torch.Tensor):
        self.weight_indices = weight_indices

    def apply_lora(self, base_output: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        pool = self.lora_manager.memory_pool
        for slot in range(self.lora_manager.max_loras_per_batch):
            scaling = self.lora_manager.scalings[slot]
            sel = (self.weight_indices == slot).to(x.dtype)[:, None, None]
            lora_out = (x @ pool.A_buffer[slot].t()) @ pool.B_buffer[slot].t()
            base_output = base_output + scaling * sel * lora_out
        return base_output

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.apply_lora(self.base_layer(x), x)
