import copy
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class GuardConfig:
    in_dim: int = 32
    hidden: int = 64
    n_classes: int = 5
    batch: int = 24
    lr: float = 0.1
    spike_threshold: float = 4.0
    spike_scale: float = 0.1
    steps: int = 6


class SmallNet(nn.Module):
    def __init__(self, cfg: GuardConfig):
        super().__init__()
        self.fc1 = nn.Linear(cfg.in_dim, cfg.hidden)
        self.fc2 = nn.Linear(cfg.hidden, cfg.n_classes)

    def forward(self, x):
        return self.fc2(F.relu(self.fc1(x)))


class GuardedStep:
    def __init__(self, model, cfg: GuardConfig):
        self.model, self.cfg = model, cfg
        self.opt = torch.optim.SGD(model.parameters(), lr=cfg.lr)

    def _effective_loss(self, loss):
        if loss > self.cfg.spike_threshold:  # expect: CG201
            return loss * self.cfg.spike_scale
        return loss

    def __call__(self, x, y):
        loss = F.cross_entropy(self.model(x), y)
        self._effective_loss(loss).backward()
        self.opt.step()
        return loss.detach()


class CapturedTrainer:
    def __init__(self, step: GuardedStep, x0, y0):
        self.step = step
        self.static_x, self.static_y = x0.clone(), y0.clone()
        self.graph = torch.cuda.CUDAGraph()

    def capture(self):
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(3):
                self.step.opt.zero_grad(set_to_none=True)
                self.step(self.static_x, self.static_y)
        torch.cuda.current_stream().wait_stream(s)
        self.step.opt.zero_grad(set_to_none=True)
        with torch.cuda.graph(self.graph):
            self.static_loss = self.step(self.static_x, self.static_y)

    def train(self, x, y):
        self.static_x.copy_(x)
        self.static_y.copy_(y)
        self.graph.replay()
        return self.static_loss.clone()


def main():
    torch.manual_seed(0)
    torch.backends.cuda.matmul.allow_tf32 = False
    cfg, device = GuardConfig(), torch.device("cuda")
    model = SmallNet(cfg).to(device)
    ref_model = copy.deepcopy(model)
    xs = torch.randn(cfg.steps + 1, cfg.batch, cfg.in_dim, device=device)
    ys = torch.randint(0, cfg.n_classes, (cfg.steps + 1, cfg.batch), device=device)

    trainer = CapturedTrainer(GuardedStep(model, cfg), xs[0], ys[0])
    trainer.capture()
    graph_losses = [trainer.train(xs[i], ys[i]) for i in range(1, cfg.steps + 1)]

    ref = GuardedStep(ref_model, cfg)
    ref_losses = []
    for i in [0, 0, 0] + list(range(1, cfg.steps + 1)):
        ref.opt.zero_grad(set_to_none=True)
        ref_losses.append(ref(xs[i], ys[i]))
    ref_losses = ref_losses[3:]

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
