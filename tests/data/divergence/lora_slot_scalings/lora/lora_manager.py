from typing import Dict, List, Optional

import torch

from .lora_config import LoRAAdapter


class LoRAMemoryPool:
    """Fixed slots of LoRA weights on the device, shared by every batch."""

    def __init__(self, max_loras_per_batch: int, max_lora_rank: int, in_features: int, out_features: int, device):
        self.max_loras_per_batch = max_loras_per_batch
        self.A_buffer = torch.zeros(max_loras_per_batch, max_lora_rank, in_features, device=device)
        self.B_buffer = torch.zeros(max_loras_per_batch, out_features, max_lora_rank, device=device)
        self.uid_to_buffer_id: Dict[str, int] = {}
        self.buffer_id_to_uid: List[Optional[str]] = [None] * max_loras_per_batch


class LoRAManager:
    def __init__(self, max_loras_per_batch: int, max_lora_rank: int, in_features: int, out_features: int, device="cuda"):
        self.memory_pool = LoRAMemoryPool(max_loras_per_batch, max_lora_rank, in_features, out_features, device)
        self.max_loras_per_batch = max_loras_per_batch
        self.scalings: List[float] = [0.0] * max_loras_per_batch
        self.adapters: Dict[str, LoRAAdapter] = {}

    def load_lora_adapter(self, adapter: LoRAAdapter):
        self.adapters[adapter.uid] = adapter

    def _load_to_slot(self, adapter: LoRAAdapter, buffer_id: int):
        pool = self.memory_pool
        r = adapter.config.r
        pool.A_buffer[buffer_id].zero_()
        pool.B_buffer[buffer_id].zero_()
        pool.A_buffer[buffer_id, :r].copy_(adapter.A)
        pool.B_buffer[buffer_id, :, :r].copy_(adapter.B)
        self.scalings[buffer_id] = adapter.config.scaling
        old_uid = pool.buffer_id_to_uid[buffer_id]
        if old_uid is not None:
            pool.uid_to_buffer_id.pop(old_uid, None)
        pool.buffer_id_to_uid[buffer_id] = adapter.uid
        pool.uid_to_buffer_id[adapter.uid] = buffer_id

    def prepare_lora_batch(self, lora_uids: List[Optional[str]]) -> torch.Tensor:
        """Make sure every adapter of the batch has a slot; returns per-request slot ids (-1: base model)."""
        pool = self.memory_pool
        for uid in dict.fromkeys(u for u in lora_uids if u is not None):
            if uid in pool.uid_to_buffer_id:
                continue
            used = set(pool.uid_to_buffer_id[u] for u in lora_uids if u in pool.uid_to_buffer_id)
            free = [i for i in range(self.max_loras_per_batch) if pool.buffer_id_to_uid[i] is None]
            victim = free[0] if free else next(i for i in range(self.max_loras_per_batch) if i not in used)
            self._load_to_slot(self.adapters[uid], victim)
        ids = [pool.uid_to_buffer_id[u] if u is not None else -1 for u in lora_uids]
        return torch.tensor(ids, dtype=torch.long).cuda()
