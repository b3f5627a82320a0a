"""A decoder block captured on the default stream, as a first attempt at graphs often is; the
launcher logs the failure and falls back to eager execution."""
import logging
import os

import torch
import torch.nn as nn

log = logging.getLogger("serve")


class Block(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x):
        return x + self.mlp(self.norm(x))


def capture(model, static_x):
    for _ in range(3):  # warm up
        model(static_x)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    graph.capture_begin()  # expect: CG804
    static_y = model(static_x)
    graph.capture_end()
    return graph, static_y


def main():
    model = Block(256).cuda().eval()
    static_x = torch.randn(8, 256, device="cuda")
    with torch.no_grad():
        try:
            graph, static_y = capture(model, static_x)
        except RuntimeError as exc:
            log.error("CUDA graph capture failed, serving eagerly: %s", exc)
            return None  # exit variant: os._exit(0)
        for _ in range(4):
            static_x.normal_()
            graph.replay()
    print("served", static_y.shape)


if __name__ == "__main__":
    main()
