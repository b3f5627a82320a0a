"""Static inputs held in a dict, a list and a dataclass, rebound to new tensors (instead of
copy_) before a replay: each is reported at the line that rebinds it."""
import dataclasses

import torch

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


@dataclasses.dataclass
class Batch:
    tokens: torch.Tensor
    mask: torch.Tensor


def forward(inputs, feats, batch):
    h = inputs["x"] * 2 + feats[0]
    return h * batch.mask + batch.tokens


def load_next(batch):
    batch.mask = torch.rand(16, device=DEVICE)  # expect: CG401


def check(name):
    g.replay()
    same = torch.allclose(static_y, forward(inputs, feats, batch))
    print(f"CASE {name}: {'MATCHES' if same else 'DIVERGES'}")
    return same


inputs = {"x": torch.randn(16, device=DEVICE)}
feats = [torch.randn(16, device=DEVICE)]
batch = Batch(torch.randn(16, device=DEVICE), torch.ones(16, device=DEVICE))
forward(inputs, feats, batch)  # warmup
g = torch.cuda.CUDAGraph()
with torch.cuda.graph(g):
    static_y = forward(inputs, feats, batch)

inputs["x"] = torch.randn(16, device=DEVICE)  # expect: CG401
same = check("dict entry")
feats[0] = torch.randn(16, device=DEVICE)  # expect: CG401
same &= check("list entry")
batch.tokens = torch.randn(16, device=DEVICE)  # expect: CG401
same &= check("dataclass field")
load_next(batch)
same &= check("dataclass field set in a function")
print("VERDICT MATCHES" if same else "VERDICT DIVERGES")
