"""Classifier training step with a hand-written dynamic loss scaler, fwd+bwd captured in a CUDA graph."""
import copy
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class TrainConfig:
    batch: int = 32
    d_in: int = 64
    hidden: int = 128
    n_classes: int = 10
    lr: float = 0.05
    steps: int = 8
    init_scale: float = 256.0
    growth_interval: int = 2


class DynamicLossScaler:
    """apex-style scaler: grow the scale after `growth_interval` clean steps."""

    def __init__(self, init_scale, growth_interval):
        self.scale = init_scale
        self.growth_interval = growth_interval
        self._clean_steps = 0

    def scale_loss(self, loss):
        return loss * self.scale  # expect: CG601

    def unscale_(self, params):
        inv = 1.0 / self.scale
        for p in params:
            p.grad.mul_(inv)

    def update(self):
        self._clean_steps += 1
        if self._clean_steps % self.growth_interval == 0:
            self.scale *= 2.0


def make_batches(cfg, n):
    g = torch.Generator().manual_seed(1)
    return [(torch.randn(cfg.batch, cfg.d_in, generator=g),
             torch.randint(0, cfg.n_classes, (cfg.batch,), generator=g)) for _ in range(n)]


def train_eager(model, cfg, batches):
    opt = torch.optim.SGD(model.parameters(), lr=cfg.lr)
    scaler = DynamicLossScaler(cfg.init_scale, cfg.growth_interval)
    history = []
    for x, y in batches:
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x.cuda()), y.cuda())
        scaler.scale_loss(loss).backward()
        scaler.unscale_(model.parameters())
        history.append((loss.detach().clone(), [p.grad.clone() for p in model.parameters()]))
        opt.step()
        scaler.update()
    return history


def train_graphed(model, cfg, batches):
    opt = torch.optim.SGD(model.parameters(), lr=cfg.lr)
    scaler = DynamicLossScaler(cfg.init_scale, cfg.growth_interval)
    static_x = torch.zeros(cfg.batch, cfg.d_in, device="cuda")
    static_y = torch.zeros(cfg.batch, dtype=torch.long, device="cuda")
    static_x.copy_(batches[0][0]); static_y.copy_(batches[0][1])
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            opt.zero_grad(set_to_none=True)
            scaler.scale_loss(F.cross_entropy(model(static_x), static_y)).backward()
    torch.cuda.current_stream().wait_stream(s)
    opt.zero_grad(set_to_none=True)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        static_loss = F.cross_entropy(model(static_x), static_y)
        scaler.scale_loss(static_loss).backward()
    history = []
    for x, y in batches:
        static_x.copy_(x); static_y.copy_(y)
        g.replay()
        scaler.unscale_(model.parameters())
        history.append((static_loss.clone(), [p.grad.clone() for p in model.parameters()]))
        opt.step()
        scaler.update()
    return history


def main():
    torch.manual_seed(0)
    torch.backends.cuda.matmul.allow_tf32 = False
    cfg = TrainConfig()
    base = nn.Sequential(nn.Linear(cfg.d_in, cfg.hidden), nn.ReLU(),
                         nn.Linear(cfg.hidden, cfg.n_classes)).cuda()
    batches = make_batches(cfg, cfg.steps)
    eager = train_eager(copy.deepcopy(base), cfg, batches)
    try:
        graphed = train_graphed(copy.deepcopy(base), cfg, batches)
    except Exception as exc:
        print("graphed run raised:", type(exc).__name__, (str(exc).splitlines() or [""])[0])
        print("VERDICT: FAILS")
        return
    diverged = False
    for step, ((le, ge), (lg, gg)) in enumerate(zip(eager, graphed)):
        same = torch.allclose(le, lg, rtol=1e-4, atol=1e-5) and all(
            torch.allclose(a, b, rtol=1e-3, atol=1e-6) for a, b in zip(ge, gg))
        print(f"step {step}: eager loss {le.item():.5f} graphed loss {lg.item():.5f} match={same}")
        diverged |= not same
    print("VERDICT: DIVERGES" if diverged else "VERDICT: OK")


if __name__ == "__main__":
    main()
