import copy
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class WarmupCosine:
    def __init__(self, base_lr, warmup_steps, total_steps):
        self.base_lr = base_lr
        self.warmup_steps = warmup_steps
        self.total_steps = total_steps
        self.step_num = 0

    @property
    def lr(self):
        s = self.step_num
        if s < self.warmup_steps:  # expect: CG202
            return self.base_lr * (s + 1) / self.warmup_steps
        frac = (s - self.warmup_steps) / max(1, self.total_steps - self.warmup_steps)
        return 0.5 * self.base_lr * (1.0 + math.cos(math.pi * frac))

    def step(self):
        self.step_num += 1


class Regressor(nn.Module):
    def __init__(self, d_in=16, d_hidden=64):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(d_in, d_hidden), nn.Tanh(), nn.Linear(d_hidden, 1))

    def forward(self, x):
        return self.net(x).squeeze(-1)


class Trainer:
    def __init__(self, model, schedule):
        self.model = model
        self.schedule = schedule
        self.params = list(model.parameters())

    def _apply_update(self):
        with torch.no_grad():
            lr = self.schedule.lr
            for p in self.params:
                p.add_(p.grad, alpha=-lr)  # expect: CG601

    def train_step(self, x, y):
        loss = F.mse_loss(self.model(x), y)
        loss.backward()
        self._apply_update()
        return loss.detach()

    def zero_grad(self):
        for p in self.params:
            p.grad = None


class GraphedTrainer(Trainer):
    def capture(self, x_example, y_example, warmup_iters=3):
        self.static_x = x_example.clone()
        self.static_y = y_example.clone()
        snapshot = [p.detach().clone() for p in self.params]
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(warmup_iters):
                self.zero_grad()
                self.train_step(self.static_x, self.static_y)
        torch.cuda.current_stream().wait_stream(s)
        self.zero_grad()
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self.static_loss = self.train_step(self.static_x, self.static_y)
        with torch.no_grad():
            for p, p0 in zip(self.params, snapshot):
                p.copy_(p0)

    def step(self, x, y):
        self.static_x.copy_(x)
        self.static_y.copy_(y)
        self.graph.replay()
        return self.static_loss.item()


def main():
    torch.manual_seed(0)
    dev = torch.device("cuda")
    batches = [(torch.randn(32, 16, device=dev), torch.randn(32, device=dev)) for _ in range(12)]
    base = Regressor().to(dev)

    ref = Trainer(copy.deepcopy(base), WarmupCosine(0.05, 5, 12))
    ref_losses = []
    for x, y in batches:
        ref.zero_grad()
        ref_losses.append(ref.train_step(x, y).item())
        ref.schedule.step()

    try:
        tr = GraphedTrainer(copy.deepcopy(base), WarmupCosine(0.05, 5, 12))
        tr.capture(*batches[0])
        losses = []
        for x, y in batches:
            losses.append(tr.step(x, y))
            tr.schedule.step()
    except Exception as e:
        print(f"graph error: {type(e).__name__}: {str(e)[:300]}")
        print("VERDICT: FAILS")
        return

    ok = all(math.isclose(a, b, rel_tol=1e-4, abs_tol=1e-5) for a, b in zip(ref_losses, losses))
    for p, q in zip(ref.params, tr.params):
        ok = ok and torch.allclose(p, q, rtol=1e-4, atol=1e-5)
    print(f"final loss eager={ref_losses[-1]:.5f} graphed={losses[-1]:.5f}")
    print("VERDICT: OK" if ok else "VERDICT: DIVERGES")


if __name__ == "__main__":
    main()
