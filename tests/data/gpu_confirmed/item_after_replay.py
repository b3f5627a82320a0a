"""Regression trainer: fwd+bwd captured once; logging, clipping and the optimizer step run eagerly after replay."""
import copy
from dataclasses import dataclass

import torch
import torch.nn as nn


@dataclass(frozen=True)
class Config:
    in_dim: int = 32
    hidden: int = 64
    batch: int = 64
    steps: int = 8
    lr: float = 0.02
    use_aux_loss: bool = True
    aux_weight: float = 0.1
    clip_norm: float = 1.0


class Regressor(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.body = nn.Sequential(nn.Linear(cfg.in_dim, cfg.hidden), nn.SiLU(), nn.Linear(cfg.hidden, cfg.hidden))
        self.main_head = nn.Linear(cfg.hidden, 1)
        self.aux_head = nn.Linear(cfg.hidden, cfg.in_dim)

    def loss(self, x, y):
        h = torch.nn.functional.silu(self.body(x))
        loss = (self.main_head(h).squeeze(-1) - y).pow(2).mean()
        if self.cfg.use_aux_loss:
            loss = loss + self.cfg.aux_weight * (self.aux_head(h) - x).pow(2).mean()
        return loss


class Logger:
    def __init__(self):
        self.history = []

    def log(self, step, loss_value, grad_norm):
        self.history.append((step, loss_value, grad_norm))


def data(cfg):
    g = torch.Generator(device="cuda").manual_seed(21)
    w = torch.randn(cfg.in_dim, device="cuda", generator=g)
    xs = [torch.randn(cfg.batch, cfg.in_dim, device="cuda", generator=g) for _ in range(cfg.steps)]
    return [(x, torch.sin(x @ w)) for x in xs]


def main():
    torch.manual_seed(0)
    torch.backends.cuda.matmul.allow_tf32 = False
    cfg = Config()
    base = Regressor(cfg).cuda()
    batches = data(cfg)

    model = copy.deepcopy(base)
    opt = torch.optim.SGD(model.parameters(), lr=cfg.lr, momentum=0.9)
    eager_log = Logger()
    for step, (x, y) in enumerate(batches):
        opt.zero_grad(set_to_none=True)
        loss = model.loss(x, y)
        loss.backward()
        gn = torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.clip_norm)
        opt.step()
        eager_log.log(step, loss.item(), gn.item())

    try:
        model = copy.deepcopy(base)
        opt = torch.optim.SGD(model.parameters(), lr=cfg.lr, momentum=0.9)
        static_x, static_y = batches[0][0].clone(), batches[0][1].clone()
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(3):
                opt.zero_grad(set_to_none=True)
                model.loss(static_x, static_y).backward()
        torch.cuda.current_stream().wait_stream(s)
        opt.zero_grad(set_to_none=True)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            static_loss = model.loss(static_x, static_y)
            static_loss.backward()
        graph_log = Logger()
        for step, (x, y) in enumerate(batches):
            static_x.copy_(x); static_y.copy_(y)
            graph.replay()
            gn = torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.clip_norm)
            opt.step()
            graph_log.log(step, static_loss.item(), gn.item())
    except Exception as exc:
        print("graphed run raised:", type(exc).__name__, (str(exc).splitlines() or [""])[0])
        print("VERDICT: FAILS")
        return
    diverged = False
    for (step, le, ge), (_, lg, gg) in zip(eager_log.history, graph_log.history):
        ok = abs(le - lg) <= 1e-5 + 1e-4 * abs(le) and abs(ge - gg) <= 1e-5 + 1e-4 * abs(ge)
        print(f"step {step}: loss eager {le:.6f} graphed {lg:.6f} | grad-norm {ge:.4f} vs {gg:.4f} match={ok}")
        diverged |= not ok
    print("VERDICT: DIVERGES" if diverged else "VERDICT: OK")


if __name__ == "__main__":
    main()
