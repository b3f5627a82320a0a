"""Karras-style Euler sampler for a toy denoiser, one CUDA graph per denoising step."""
from dataclasses import dataclass

import torch
import torch.nn as nn


@dataclass
class SamplerConfig:
    batch: int = 4
    dim: int = 32
    steps: int = 10
    sigma_min: float = 0.02
    sigma_max: float = 10.0
    rho: float = 7.0


def karras_sigmas(cfg: SamplerConfig):
    ramp = torch.linspace(0, 1, cfg.steps)
    lo, hi = cfg.sigma_min ** (1 / cfg.rho), cfg.sigma_max ** (1 / cfg.rho)
    sig = (hi + ramp * (lo - hi)) ** cfg.rho
    return sig.tolist() + [0.0]


class ToyDenoiser(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(dim + 1, 64), nn.SiLU(), nn.Linear(64, dim))

    def forward(self, x, sigma):
        c_in = 1.0 / torch.sqrt(sigma * sigma + 1.0)
        feat = torch.cat([x * c_in, torch.log(sigma).expand(x.shape[0], 1)], dim=-1)
        return x * (1.0 / (sigma * sigma + 1.0)) + self.net(feat)


class EulerSampler:
    def __init__(self, model, cfg: SamplerConfig, device):
        self.model, self.cfg = model, cfg
        self.sigmas = karras_sigmas(cfg)
        self.latents = torch.zeros(cfg.batch, cfg.dim, device=device)
        self.sigma_buf = torch.ones(1, 1, device=device)
        self.dsigma_buf = torch.zeros(1, 1, device=device)
        self.graph = torch.cuda.CUDAGraph()

    def _euler_step(self):
        denoised = self.model(self.latents, self.sigma_buf)
        d = (self.latents - denoised) / self.sigma_buf
        return self.latents + d * self.dsigma_buf

    def capture(self):
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(3):
                self._euler_step()
        torch.cuda.current_stream().wait_stream(s)
        with torch.cuda.graph(self.graph):
            self.static_next = self._euler_step()

    def sample(self, noise):
        self.latents.copy_(noise * self.sigmas[0])
        for s_cur, s_next in zip(self.sigmas[:-1], self.sigmas[1:]):
            self.sigma_buf.fill_(s_cur)
            self.dsigma_buf.fill_(s_next - s_cur)
            self.graph.replay()
            self.latents = self.static_next.clone()  # expect: CG401
        return self.latents


def eager_sample(model, sigmas, noise, device):
    x = noise * sigmas[0]
    for s_cur, s_next in zip(sigmas[:-1], sigmas[1:]):
        sig = torch.full((1, 1), s_cur, device=device)
        d = (x - model(x, sig)) / sig
        x = x + d * (s_next - s_cur)
    return x


@torch.no_grad()
def main():
    torch.manual_seed(0)
    cfg, device = SamplerConfig(), "cuda"
    model = ToyDenoiser(cfg.dim).to(device).eval()
    noise = torch.randn(cfg.batch, cfg.dim, device=device)
    ref = eager_sample(model, karras_sigmas(cfg), noise, device)
    try:
        sampler = EulerSampler(model, cfg, device)
        sampler.capture()
        out = sampler.sample(noise)
        torch.cuda.synchronize()
    except Exception as exc:
        print(f"graph error: {type(exc).__name__}: {exc}")
        print("VERDICT: FAILS")
        return
    print(f"max |diff| = {(out - ref).abs().max().item():.3e}")
    print("VERDICT: OK" if torch.allclose(out, ref, rtol=1e-4, atol=1e-4) else "VERDICT: DIVERGES")


if __name__ == "__main__":
    main()
