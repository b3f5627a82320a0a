"""DDIM sampler where per-step coefficients are pushed into device buffers before each replay."""
import math
from dataclasses import dataclass

import torch
import torch.nn as nn


@dataclass
class DDIMConfig:
    batch: int = 4
    dim: int = 24
    train_steps: int = 1000
    sample_steps: int = 12
    clip_x0: float = 3.0


def alpha_bar(t: int, total: int) -> float:
    return math.cos((t / total + 0.008) / 1.008 * math.pi / 2) ** 2


class EpsModel(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(dim + 1, 64), nn.SiLU(), nn.Linear(64, dim))

    def forward(self, x, t_frac):
        return self.net(torch.cat([x, t_frac.expand(x.shape[0], 1)], -1))


class DDIMSampler:
    def __init__(self, model, cfg: DDIMConfig, device):
        self.model, self.cfg = model, cfg
        self.timesteps = list(range(cfg.train_steps - 1, 0, -cfg.train_steps // cfg.sample_steps))
        self.x = torch.zeros(cfg.batch, cfg.dim, device=device)
        self.t_frac = torch.zeros(1, 1, device=device)
        self.a_t = torch.ones(1, 1, device=device)
        self.a_prev = torch.ones(1, 1, device=device)
        self.current_t = None
        self.graph = torch.cuda.CUDAGraph()

    def _step(self, x, t_frac, a_t, a_prev):
        eps = self.model(x, t_frac)
        x0 = ((x - (1 - a_t).sqrt() * eps) / a_t.sqrt()).clamp(-self.cfg.clip_x0, self.cfg.clip_x0)
        return a_prev.sqrt() * x0 + (1 - a_prev).sqrt() * eps

    def capture(self):
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(3):
                self._step(self.x, self.t_frac, self.a_t, self.a_prev)
        torch.cuda.current_stream().wait_stream(s)
        with torch.cuda.graph(self.graph):
            self.x.copy_(self._step(self.x, self.t_frac, self.a_t, self.a_prev))

    def coefficients(self, i):
        t = self.timesteps[i]
        t_prev = self.timesteps[i + 1] if i + 1 < len(self.timesteps) else 0
        total = self.cfg.train_steps
        return t / total, alpha_bar(t, total), alpha_bar(t_prev, total)

    def sample(self, noise):
        self.x.copy_(noise)
        for i in range(len(self.timesteps)):
            self.current_t = self.timesteps[i]
            frac, a_t, a_prev = self.coefficients(i)
            self.t_frac.fill_(frac)
            self.a_t.fill_(a_t)
            self.a_prev.fill_(a_prev)
            self.graph.replay()
        return self.x.clone()


@torch.no_grad()
def main():
    torch.manual_seed(0)
    cfg, device = DDIMConfig(), "cuda"
    model = EpsModel(cfg.dim).to(device).eval()
    noise = torch.randn(cfg.batch, cfg.dim, device=device)
    ref_sampler = DDIMSampler(model, cfg, device)
    x = noise.clone()
    for i in range(len(ref_sampler.timesteps)):
        coeffs = [torch.full((1, 1), c, device=device) for c in ref_sampler.coefficients(i)]
        x = ref_sampler._step(x, *coeffs)
    try:
        sampler = DDIMSampler(model, cfg, device)
        sampler.capture()
        out = sampler.sample(noise)
        torch.cuda.synchronize()
    except Exception as exc:
        print(f"graph error: {type(exc).__name__}: {exc}")
        print("VERDICT: FAILS")
        return
    print(f"max |diff| = {(out - x).abs().max().item():.3e}")
    print("VERDICT: OK" if torch.allclose(out, x, rtol=1e-4, atol=1e-5) else "VERDICT: DIVERGES")


if __name__ == "__main__":
    main()
