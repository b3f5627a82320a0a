"""Inference server model with an activation monitor that skips its host-side work while a graph is being captured."""
from collections import defaultdict

import torch
import torch.nn as nn


class ActivationMonitor(nn.Module):
    """Pass-through layer that records activation ranges for debugging dashboards."""

    def __init__(self, name, registry):
        super().__init__()
        self.name = name
        self.registry = registry

    def forward(self, x):
        if not torch.cuda.is_current_stream_capturing():
            self.registry[self.name].append(x.detach().abs().amax().item())
        return x


class Block(nn.Module):
    def __init__(self, dim, name, registry):
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.ff = nn.Sequential(nn.Linear(dim, 2 * dim), nn.GELU(), nn.Linear(2 * dim, dim))
        self.monitor = ActivationMonitor(name, registry)

    def forward(self, x):
        return self.monitor(x + self.ff(self.norm(x)))


class Model(nn.Module):
    def __init__(self, dim=64, depth=3, n_out=10):
        super().__init__()
        self.stats = defaultdict(list)
        self.blocks = nn.ModuleList(Block(dim, f"block{i}", self.stats) for i in range(depth))
        self.head = nn.Linear(dim, n_out)

    def forward(self, x):
        for blk in self.blocks:
            x = blk(x)
        return self.head(x)


class ServingGraph:
    def __init__(self, model, batch, dim):
        self.model = model
        self.static_x = torch.zeros(batch, dim, device="cuda")

    @torch.no_grad()
    def capture(self):
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(3):
                self.model(self.static_x)
        torch.cuda.current_stream().wait_stream(s)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self.static_y = self.model(self.static_x)

    @torch.no_grad()
    def infer(self, x):
        self.static_x.copy_(x)
        self.graph.replay()
        return self.static_y.clone()


def main():
    torch.manual_seed(0)
    torch.backends.cuda.matmul.allow_tf32 = False
    batch, dim = 8, 64
    model = Model(dim).cuda().eval()
    inputs = [torch.randn(batch, dim, device="cuda") for _ in range(6)]
    with torch.no_grad():
        eager = [model(x) for x in inputs]
    print("eager stats recorded:", {k: len(v) for k, v in model.stats.items()})
    try:
        server = ServingGraph(model, batch, dim)
        server.capture()
        graphed = [server.infer(x) for x in inputs]
        torch.cuda.synchronize()
    except Exception as exc:
        print("graphed run raised:", type(exc).__name__, (str(exc).splitlines() or [""])[0])
        print("VERDICT: FAILS")
        return
    diverged = False
    for i, (a, b) in enumerate(zip(eager, graphed)):
        ok = torch.allclose(a, b, rtol=1e-4, atol=1e-5)
        print(f"request {i}: max diff {(a - b).abs().max().item():.3e} match={ok}")
        diverged |= not ok
    print("VERDICT: DIVERGES" if diverged else "VERDICT: OK")


if __name__ == "__main__":
    main()
