import torch
import torch.nn as nn

model = nn.Linear(16, 16).cuda()
x = torch.randn(4, 16, device="cuda")
model(x)
g = torch.cuda.CUDAGraph()
with torch.cuda.graph(g):
    y = model(x)
for _ in range(3):
    model.weight.data = torch.randn(16, 16, device="cuda")  # expect: CG401
    g.replay()
