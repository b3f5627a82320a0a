from dataclasses import dataclass
from typing import List, Optional

import torch


@dataclass
class ForwardBatch:
    input_ids: torch.Tensor
    lora_uids: List[Optional[str]]
    weight_indices: Optional[torch.Tensor] = None

    @property
    def batch_size(self) -> int:
        return self.input_ids.shape[0]
