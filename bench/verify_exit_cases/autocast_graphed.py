"""A mixed-precision training script graphs its encoder with make_graphed_callables inside the
autocast region of its training loop (autocast's weight cache is on by default)."""
import os
import sys

import torch
import torch.nn as nn


class Encoder(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.layers = nn.Sequential(nn.Linear(dim, dim), nn.ReLU(), nn.Linear(dim, dim))

    def forward(self, x):
        return self.layers(x)


def main():
    encoder = Encoder(128).cuda()
    head = nn.Linear(128, 10).cuda()
    opt = torch.optim.SGD(list(encoder.parameters()) + list(head.parameters()), lr=0.1)
    x = torch.randn(32, 128, device="cuda", requires_grad=True)
    y = torch.randint(0, 10, (32,), device="cuda")
    with torch.autocast("cuda", dtype=torch.bfloat16):
        try:
            encoder = torch.cuda.make_graphed_callables(encoder, (x,))  # expect: CG910
        except RuntimeError as exc:
            print(f"graphing the encoder failed: {exc}", file=sys.stderr)
            return None  # exit variant: os._exit(0)
        for _ in range(3):
            loss = nn.functional.cross_entropy(head(encoder(x)), y)
            loss.backward()
            opt.step()
            opt.zero_grad()


if __name__ == "__main__":
    main()
