"""Evaluation with test-time augmentation: a random gain jitter per batch, model wrapped in a graph runner."""
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn as nn


@dataclass
class EvalConfig:
    batch: int = 32
    in_dim: int = 48
    n_classes: int = 8
    n_batches: int = 6
    gain_range: tuple = (0.6, 1.4)
    seed: int = 1234


class GainJitter:
    """Host-side augmentation policy: one random gain per batch."""

    def __init__(self, lo, hi, seed):
        self.lo, self.hi = lo, hi
        self.rng = np.random.default_rng(seed)

    def __call__(self, x):
        gain = float(self.rng.uniform(self.lo, self.hi))  # expect: CG302
        return x * gain


class TTAClassifier(nn.Module):
    def __init__(self, cfg, augment):
        super().__init__()
        self.augment = augment
        self.net = nn.Sequential(nn.Linear(cfg.in_dim, 128), nn.ReLU(), nn.Linear(128, 128), nn.ReLU(),
                                 nn.Linear(128, cfg.n_classes))

    def forward(self, x):
        clean = self.net(x).softmax(-1)
        jittered = self.net(self.augment(x)).softmax(-1)
        return 0.5 * (clean + jittered)


class GraphRunner:
    def __init__(self, module, example):
        self.module = module
        self.static_in = example.clone()
        self.graph = None

    @torch.no_grad()
    def capture(self, warmup=3):
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(warmup):
                self.module(self.static_in)
        torch.cuda.current_stream().wait_stream(s)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self.static_out = self.module(self.static_in)
        return self

    def __call__(self, x):
        self.static_in.copy_(x)
        self.graph.replay()
        return self.static_out.clone()


def main():
    torch.manual_seed(0)
    torch.backends.cuda.matmul.allow_tf32 = False
    cfg = EvalConfig()
    data = [torch.randn(cfg.batch, cfg.in_dim, device="cuda") for _ in range(cfg.n_batches)]
    model = TTAClassifier(cfg, GainJitter(*cfg.gain_range, cfg.seed)).cuda().eval()

    with torch.no_grad():
        eager = [model(x) for x in data]

    try:
        model.augment = GainJitter(*cfg.gain_range, cfg.seed)
        runner = GraphRunner(model, data[0]).capture()
        graphed = [runner(x) for x in data]
        torch.cuda.synchronize()
    except Exception as exc:
        print("graphed run raised:", type(exc).__name__, (str(exc).splitlines() or [""])[0])
        print("VERDICT: FAILS")
        return
    diverged = False
    for i, (a, b) in enumerate(zip(eager, graphed)):
        ok = torch.allclose(a, b, rtol=1e-4, atol=1e-6)
        print(f"batch {i}: max |p_eager - p_graph| = {(a - b).abs().max().item():.3e} match={ok}")
        diverged |= not ok
    print("VERDICT: DIVERGES" if diverged else "VERDICT: OK")


if __name__ == "__main__":
    main()
