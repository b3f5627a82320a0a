from dataclasses import dataclass

import torch


@dataclass
class LoRAConfig:
    r: int
    lora_alpha: float

    @property
    def scaling(self) -> float:
        return self.lora_alpha / self.r


@dataclass
class LoRAAdapter:
    uid: str
    config: LoRAConfig
    A: torch.Tensor  # (r, in_features)
    B: torch.Tensor  # (out_features, r)

    @classmethod
    def random(cls, uid: str, in_features: int, out_features: int, r: int, alpha: float, seed: int):
        g = torch.Generator().manual_seed(seed)
        return cls(
            uid,
            LoRAConfig(r=r, lora_alpha=alpha),
            torch.randn(r, in_features, generator=g) * 0.1,
            torch.randn(out_features, r, generator=g) * 0.1,
        )
