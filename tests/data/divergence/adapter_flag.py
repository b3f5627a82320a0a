import torch
import torch.nn as nn


class LoRALinear(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.base = nn.Linear(d, d)
        self.lora = nn.Linear(d, d, bias=False)
        self.enabled = True

    def forward(self, x):
        out = self.base(x)
        if self.enabled:  # expect: CG202
            out = out + self.lora(x)
        return out


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([LoRALinear(16) for _ in range(2)])

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x


def set_adapters(model, enabled):
    for m in model.modules():
        if isinstance(m, LoRALinear):
            m.enabled = enabled


model = Model().cuda()
x = torch.randn(2, 16, device="cuda")
model(x)
g = torch.cuda.CUDAGraph()
with torch.cuda.graph(g):
    y = model(x)
set_adapters(model, False)
g.replay()
