"""The twin of rebound_inputs.py: new values written in place (copy_, fill_, slice
assignment), entries rebound before the capture, rebound and restored before a replay, and
rebound after the last replay."""
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
    batch.mask.copy_(torch.rand(16, device=DEVICE))


def check(name):
    g.replay()
    same = torch.allclose(static_y, forward(inputs, feats, batch))
    print(f"CASE {name}: {'MATCHES' if same else 'DIVERGES'}")
    return same


inputs = {"x": torch.randn(16, device=DEVICE)}
feats = [torch.randn(16, device=DEVICE)]
batch = Batch(torch.randn(16, device=DEVICE), torch.ones(16, device=DEVICE))
inputs["x"] = torch.randn(16, device=DEVICE)  # before the capture: the graph reads this one
forward(inputs, feats, batch)  # warmup
g = torch.cuda.CUDAGraph()
with torch.cuda.graph(g):
    static_y = forward(inputs, feats, batch)

inputs["x"].copy_(torch.randn(16, device=DEVICE))
feats[0][:] = torch.randn(16, device=DEVICE)
batch.tokens.fill_(0.5)
load_next(batch)
same = check("in place")
kept = inputs["x"]
inputs["x"] = torch.zeros(16, device=DEVICE)
inputs["x"] = kept  # restored before the replay
same &= check("restored")
batch.tokens = torch.randn(16, device=DEVICE)  # after the last replay
print("VERDICT MATCHES" if same else "VERDICT DIVERGES")
