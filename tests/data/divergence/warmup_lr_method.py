import copy
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class TrainConfig:
    in_dim: int = 16
    hidden: int = 64
    out_dim: int = 4
    batch_size: int = 32
    base_lr: float = 0.1
    warmup_steps: int = 10
    total_steps: int = 12


class Regressor(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.fc1 = nn.Linear(cfg.in_dim, cfg.hidden)
        self.fc2 = nn.Linear(cfg.hidden, cfg.hidden)
        self.fc3 = nn.Linear(cfg.hidden, cfg.out_dim)

    def forward(self, x):
        x = torch.tanh(self.fc1(x))
        x = torch.tanh(self.fc2(x))
        return self.fc3(x)


class Trainer:
    def __init__(self, model, cfg):
        self.model = model
        self.cfg = cfg
        self.global_step = 0
        self.params = [p for p in model.parameters() if p.requires_grad]

    def current_lr(self):
        frac = min(1.0, (self.global_step + 1) / self.cfg.warmup_steps)
        return self.cfg.base_lr * frac

    def train_step(self, x, y):
        pred = self.model(x)
        loss = F.mse_loss(pred, y)
        grads = torch.autograd.grad(loss, self.params)
        lr = self.current_lr()
        with torch.no_grad():
            for p, g in zip(self.params, grads):
                p.sub_(g * lr)  # expect: CG601
        return loss.detach()

    def advance(self):
        self.global_step += 1


def make_batches(cfg, n):
    xs = torch.randn(n, cfg.batch_size, cfg.in_dim, device="cuda")
    w = torch.randn(cfg.in_dim, cfg.out_dim, device="cuda")
    ys = torch.sin(xs @ w)
    return xs, ys


def main():
    torch.manual_seed(0)
    cfg = TrainConfig()
    model = Regressor(cfg).cuda()
    trainer = Trainer(model, cfg)
    xs, ys = make_batches(cfg, cfg.total_steps)

    static_x = xs[0].clone()
    static_y = ys[0].clone()

    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            trainer.train_step(static_x, static_y)
    torch.cuda.current_stream().wait_stream(s)

    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_loss = trainer.train_step(static_x, static_y)

    ref_model = copy.deepcopy(model)
    ref_trainer = Trainer(ref_model, cfg)

    losses, ref_losses = [], []
    for step in range(cfg.total_steps):
        static_x.copy_(xs[step])
        static_y.copy_(ys[step])
        graph.replay()
        losses.append(static_loss.clone())
        trainer.advance()

        ref_losses.append(ref_trainer.train_step(xs[step], ys[step]))
        ref_trainer.advance()

    torch.cuda.synchronize()
    same = all(
        torch.allclose(p, q, rtol=1e-4, atol=1e-5)
        for p, q in zip(model.parameters(), ref_model.parameters())
    )
    same = same and torch.allclose(torch.stack(losses), torch.stack(ref_losses), rtol=1e-4, atol=1e-5)
    print("VERDICT MATCHES" if same else "VERDICT DIVERGES")


if __name__ == "__main__":
    main()
