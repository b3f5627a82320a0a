import torch
import torch.nn as nn


class Decoder(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.proj = nn.Linear(d, d)
        self.temperature = 1.0
        self.num_steps = 4

    def configure(self, temperature, num_steps):
        self.temperature = temperature
        self.num_steps = num_steps

    def forward(self, x):
        for _ in range(self.num_steps):  # expect: CG202
            x = torch.tanh(self.proj(x))
        return x / self.temperature  # expect: CG601


def main():
    model = Decoder(16).cuda()
    x = torch.randn(2, 16, device="cuda")
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        model(x)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out = model(x)
    for t in (0.5, 1.0, 2.0):
        model.configure(t, 2)
        g.replay()
        print(out.sum().item())


if __name__ == "__main__":
    main()
