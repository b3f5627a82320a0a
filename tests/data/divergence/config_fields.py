from dataclasses import dataclass

import torch


@dataclass
class SamplingConfig:
    top_k: int = 50
    repetition_penalty: float = 1.1


class Sampler:
    def __init__(self):
        self.cfg = SamplingConfig()
        self.opts = {"scale": 1.0}

    def __call__(self, logits):
        logits = logits / self.cfg.repetition_penalty  # expect: CG601
        return logits * self.opts["scale"]  # expect: CG601


sampler = Sampler()
logits = torch.randn(4, 100, device="cuda")
sampler(logits)
g = torch.cuda.CUDAGraph()
with torch.cuda.graph(g):
    out = sampler(logits)
for p in (1.0, 1.2):
    sampler.cfg.repetition_penalty = p
    sampler.opts["scale"] = p
    g.replay()
