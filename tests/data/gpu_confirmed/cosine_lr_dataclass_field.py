"""Whole-step CUDA-graph training of a regressor with momentum SGD and a cosine LR schedule."""
import copy
import math
from dataclasses import dataclass, replace

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class TrainConfig:
    lr: float = 0.1
    momentum: float = 0.9
    steps: int = 30
    batch: int = 32
    in_dim: int = 16


class CosineSchedule:
    def __init__(self, cfg: TrainConfig):
        self.cfg, self.base = cfg, cfg.lr

    def __call__(self, step: int) -> None:
        self.cfg.lr = self.base * 0.5 * (1.0 + math.cos(math.pi * step / self.cfg.steps))


class Trainer:
    def __init__(self, model, cfg: TrainConfig, device):
        self.model, self.cfg = model, cfg
        self.params = list(model.parameters())
        self.bufs = [torch.zeros_like(p) for p in self.params]
        self.static_x = torch.zeros(cfg.batch, cfg.in_dim, device=device)
        self.static_y = torch.zeros(cfg.batch, 1, device=device)
        self.schedule = CosineSchedule(cfg)
        self.graph = None

    def _train_step(self):
        loss = F.mse_loss(self.model(self.static_x), self.static_y)
        grads = torch.autograd.grad(loss, self.params)
        with torch.no_grad():
            for p, g, b in zip(self.params, grads, self.bufs):
                b.mul_(self.cfg.momentum).add_(g)
                p.add_(b, alpha=-self.cfg.lr)  # expect: CG601
        return loss.detach()

    def capture(self):
        snapshot = copy.deepcopy(self.model.state_dict())
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(3):
                self._train_step()
        torch.cuda.current_stream().wait_stream(s)
        self.model.load_state_dict(snapshot)
        for b in self.bufs:
            b.zero_()
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self.static_loss = self._train_step()

    def fit(self, data):
        losses = []
        for step, (x, y) in enumerate(data):
            self.static_x.copy_(x)
            self.static_y.copy_(y)
            if self.graph is not None:
                self.graph.replay()
                losses.append(self.static_loss.clone())
            else:
                losses.append(self._train_step())
            self.schedule(step + 1)
        return torch.stack(losses)


def main():
    torch.manual_seed(0)
    cfg, device = TrainConfig(), "cuda"
    model = nn.Sequential(nn.Linear(cfg.in_dim, 32), nn.Tanh(), nn.Linear(32, 1)).to(device)
    eager_model = copy.deepcopy(model)
    w = torch.randn(cfg.in_dim, 1, device=device)
    data = []
    for _ in range(cfg.steps):
        x = torch.randn(cfg.batch, cfg.in_dim, device=device)
        data.append((x, torch.sin(x @ w)))

    ref = Trainer(eager_model, replace(cfg), device).fit(data)
    try:
        trainer = Trainer(model, replace(cfg), device)
        trainer.capture()
        out = trainer.fit(data)
        torch.cuda.synchronize()
    except Exception as exc:
        print(f"graph error: {type(exc).__name__}: {exc}")
        print("VERDICT: FAILS")
        return
    print(f"max |loss diff| = {(out - ref).abs().max().item():.3e}")
    same = torch.allclose(out, ref, rtol=1e-4, atol=1e-5) and all(
        torch.allclose(a, b, rtol=1e-4, atol=1e-5) for a, b in zip(model.parameters(), eager_model.parameters()))
    print("VERDICT: OK" if same else "VERDICT: DIVERGES")


if __name__ == "__main__":
    main()
