import torch

buf = torch.randn(64, device="cuda")
n = 8
out = torch.zeros(64, device="cuda")


def step():
    out[:n].copy_(buf[:n] * 2)  # expect: CG702


step()
g = torch.cuda.CUDAGraph()
with torch.cuda.graph(g):
    step()
for n in (8, 16, 32):
    g.replay()
