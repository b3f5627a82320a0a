"""A profiling helper synchronizes to time each layer; it is still called inside the capture."""
import logging
import os
import time

import torch
import torch.nn as nn

log = logging.getLogger("bench")


def timed(layer, x):
    start = time.perf_counter()  # expect: CG506
    out = layer(x)
    torch.cuda.synchronize()  # expect: CG104
    log.debug("%s took %.3f ms", type(layer).__name__, (time.perf_counter() - start) * 1e3)
    return out


class Stack(nn.Module):
    def __init__(self, dim: int, depth: int):
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(dim, dim) for _ in range(depth))

    def forward(self, x):
        for layer in self.layers:
            x = timed(layer, x)
        return x


def main():
    model = Stack(128, 4).cuda().eval()
    static_x = torch.randn(16, 128, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side), torch.no_grad():
        model(static_x)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.graph(graph), torch.no_grad():
            static_y = model(static_x)
    except RuntimeError as exc:
        log.error("capture failed: %s", exc)
        return None  # exit variant: os._exit(0)
    graph.replay()
    print(static_y.sum().item())


if __name__ == "__main__":
    main()
