"""A model with a forward hook that records activation statistics is handed to
make_graphed_callables; the trainer logs the error and exits."""
import logging
import os

import torch
import torch.nn as nn

log = logging.getLogger("train")
stats = {}


class Tower(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.proj = nn.Linear(dim, dim)
        self.out = nn.Linear(dim, 1)

    def forward(self, x):
        return self.out(torch.relu(self.proj(x)))


def record_stats(module, inputs, output):
    stats[type(module).__name__] = output.detach()


def main():
    model = Tower(64).cuda()
    model.register_forward_hook(record_stats)
    x = torch.randn(16, 64, device="cuda", requires_grad=True)
    try:
        model = torch.cuda.make_graphed_callables(model, (x,))  # expect: CG906
    except (RuntimeError, AssertionError) as exc:
        log.error("make_graphed_callables failed: %s", exc)
        return None  # exit variant: os._exit(0)
    model(x).sum().backward()


if __name__ == "__main__":
    main()
