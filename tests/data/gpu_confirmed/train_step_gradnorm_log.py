import copy
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class TrainConfig:
    in_dim: int = 32
    hidden: int = 64
    out_dim: int = 8
    batch: int = 16
    lr: float = 0.05
    momentum: float = 0.9
    steps: int = 6


class Regressor(nn.Module):
    def __init__(self, cfg: TrainConfig):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(cfg.in_dim, cfg.hidden), nn.GELU(),
            nn.Linear(cfg.hidden, cfg.hidden), nn.GELU(),
            nn.Linear(cfg.hidden, cfg.out_dim),
        )

    def forward(self, x):
        return self.net(x)


class Trainer:
    def __init__(self, model, cfg: TrainConfig):
        self.model = model
        self.opt = torch.optim.SGD(model.parameters(), lr=cfg.lr, momentum=cfg.momentum)
        self.metrics = {}

    def _grad_norm(self):
        norms = [p.grad.detach().norm() for p in self.model.parameters() if p.grad is not None]
        return torch.stack(norms).norm()

    def _record(self, loss):
        self.metrics["loss"] = loss.detach()
        self.metrics["grad_norm"] = self._grad_norm().item()  # expect: CG101

    def train_step(self, x, y):
        loss = F.mse_loss(self.model(x), y)
        loss.backward()
        self._record(loss)
        self.opt.step()
        return loss.detach()


class GraphedTrainStep:
    def __init__(self, trainer: Trainer, cfg: TrainConfig, device):
        self.trainer = trainer
        self.static_x = torch.zeros(cfg.batch, cfg.in_dim, device=device)
        self.static_y = torch.zeros(cfg.batch, cfg.out_dim, device=device)
        self.graph = torch.cuda.CUDAGraph()

    def capture(self, x0, y0, warmup_iters: int = 3):
        self.static_x.copy_(x0)
        self.static_y.copy_(y0)
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(warmup_iters):
                self.trainer.opt.zero_grad(set_to_none=True)
                self.trainer.train_step(self.static_x, self.static_y)
        torch.cuda.current_stream().wait_stream(s)
        self.trainer.opt.zero_grad(set_to_none=True)
        with torch.cuda.graph(self.graph):
            self.static_loss = self.trainer.train_step(self.static_x, self.static_y)

    def __call__(self, x, y):
        self.static_x.copy_(x)
        self.static_y.copy_(y)
        self.graph.replay()
        return self.static_loss.clone()


def main():
    torch.manual_seed(0)
    torch.backends.cuda.matmul.allow_tf32 = False
    cfg, device = TrainConfig(), torch.device("cuda")
    model = Regressor(cfg).to(device)
    ref_model = copy.deepcopy(model)
    xs = torch.randn(cfg.steps + 1, cfg.batch, cfg.in_dim, device=device)
    ys = torch.randn(cfg.steps + 1, cfg.batch, cfg.out_dim, device=device)

    step = GraphedTrainStep(Trainer(model, cfg), cfg, device)
    step.capture(xs[0], ys[0])
    graph_losses = [step(xs[i], ys[i]) for i in range(1, cfg.steps + 1)]

    ref = Trainer(ref_model, cfg)
    for _ in range(3):
        ref.opt.zero_grad(set_to_none=True)
        ref.train_step(xs[0], ys[0])
    ref_losses = []
    for i in range(1, cfg.steps + 1):
        ref.opt.zero_grad(set_to_none=True)
        ref_losses.append(ref.train_step(xs[i], ys[i]))

    close = lambda a, b: torch.allclose(a, b, atol=1e-4, rtol=1e-4)
    same = all(close(a, b) for a, b in zip(graph_losses, ref_losses))
    same = same and all(close(p, q) for p, q in zip(model.parameters(), ref_model.parameters()))
    return "OK" if same else "DIVERGES"


if __name__ == "__main__":
    try:
        verdict = main()
    except Exception as exc:
        print(f"{type(exc).__name__}: {exc}", flush=True)
        verdict = "FAILS"
    print(f"VERDICT: {verdict}", flush=True)
