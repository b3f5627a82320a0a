import math
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class DenoiseConfig:
    dim: int = 64
    hidden: int = 128
    batch: int = 16
    steps: int = 6
    log_sigma_mean: float = -1.2
    log_sigma_std: float = 1.2


class LogNormalSigma:
    def __init__(self, mean: float, std: float):
        self.mean, self.std = mean, std

    def draw(self) -> float:
        return float(np.exp(self.mean + self.std * np.random.randn()))  # expect: CG302


class Denoiser(nn.Module):
    def __init__(self, cfg: DenoiseConfig):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(cfg.dim + 1, cfg.hidden), nn.SiLU(),
            nn.Linear(cfg.hidden, cfg.hidden), nn.SiLU(),
            nn.Linear(cfg.hidden, cfg.dim),
        )

    def forward(self, noisy, log_sigma):
        return self.net(torch.cat([noisy, log_sigma], dim=-1))


class DenoisingObjective:
    def __init__(self, model, sampler):
        self.model, self.sampler = model, sampler

    def __call__(self, x0, eps):
        sigma = self.sampler.draw()
        c_in = 1.0 / math.sqrt(1.0 + sigma ** 2)
        noisy = x0 + sigma * eps
        cond = torch.full_like(x0[:, :1], math.log(sigma))
        x0_hat = noisy - sigma * self.model(noisy * c_in, cond)
        return F.mse_loss(x0_hat, x0, reduction="none").mean(dim=-1)


class GraphedObjective:
    def __init__(self, objective, cfg: DenoiseConfig, device):
        self.objective = objective
        self.static_x0 = torch.zeros(cfg.batch, cfg.dim, device=device)
        self.static_eps = torch.zeros(cfg.batch, cfg.dim, device=device)
        self.graph = torch.cuda.CUDAGraph()
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(3):
                self.objective(self.static_x0, self.static_eps)
        torch.cuda.current_stream().wait_stream(s)
        with torch.cuda.graph(self.graph):
            self.static_losses = self.objective(self.static_x0, self.static_eps)

    def __call__(self, x0, eps):
        self.static_x0.copy_(x0)
        self.static_eps.copy_(eps)
        self.graph.replay()
        return self.static_losses.clone()


@torch.no_grad()
def main():
    torch.manual_seed(0)
    torch.backends.cuda.matmul.allow_tf32 = False
    cfg, device = DenoiseConfig(), torch.device("cuda")
    model = Denoiser(cfg).to(device).eval()
    x0s = torch.randn(cfg.steps, cfg.batch, cfg.dim, device=device)
    noises = torch.randn(cfg.steps, cfg.batch, cfg.dim, device=device)

    np.random.seed(0)
    graphed = GraphedObjective(DenoisingObjective(model, LogNormalSigma(cfg.log_sigma_mean, cfg.log_sigma_std)), cfg, device)
    replayed = [graphed(x0s[i], noises[i]) for i in range(cfg.steps)]

    np.random.seed(0)
    eager = DenoisingObjective(model, LogNormalSigma(cfg.log_sigma_mean, cfg.log_sigma_std))
    reference = [eager(x0s[i], noises[i]) for i in range(cfg.steps)]

    same = all(torch.allclose(a, b, atol=1e-4, rtol=1e-4) for a, b in zip(replayed, reference))
    return "OK" if same else "DIVERGES"


if __name__ == "__main__":
    try:
        verdict = main()
    except Exception as exc:
        print(f"{type(exc).__name__}: {exc}", flush=True)
        verdict = "FAILS"
    print(f"VERDICT: {verdict}", flush=True)
