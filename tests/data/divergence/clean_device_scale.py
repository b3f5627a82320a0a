import torch
import torch.nn as nn


class Decoder(nn.Module):
    def __init__(self, d, temperature=1.0):
        super().__init__()
        self.proj = nn.Linear(d, d)
        self.temperature = temperature
        self.register_buffer("scale", torch.ones(()))

    def set_scale(self, s):
        self.scale.fill_(s)

    def forward(self, x):
        return self.proj(x) / self.temperature * self.scale


model = Decoder(16, temperature=0.7).cuda()
model.eval()
x = torch.randn(2, 16, device="cuda")
model(x)
g = torch.cuda.CUDAGraph()
with torch.cuda.graph(g):
    out = model(x)
for s in (0.5, 1.0):
    model.set_scale(s)
    g.replay()
