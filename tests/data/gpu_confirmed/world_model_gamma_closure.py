"""Dreamer-style latent imagination: roll a learned dynamics model under the actor and score the imagined returns."""
from dataclasses import dataclass

import torch
import torch.nn as nn


@dataclass
class WorldModelConfig:
    latent: int = 32
    action: int = 4
    hidden: int = 128
    horizon: int = 10
    batch: int = 128
    iterations: int = 6
    gamma_start: float = 0.9
    gamma_end: float = 0.99


class LatentDynamics(nn.Module):
    def __init__(self, cfg: WorldModelConfig):
        super().__init__()
        self.cell = nn.GRUCell(cfg.latent + cfg.action, cfg.hidden)
        self.to_latent = nn.Linear(cfg.hidden, cfg.latent)
        self.reward_head = nn.Sequential(nn.Linear(cfg.latent, 64), nn.ELU(), nn.Linear(64, 1))
        self.value_head = nn.Sequential(nn.Linear(cfg.latent, 64), nn.ELU(), nn.Linear(64, 1))

    def step(self, z, h, a):
        h = self.cell(torch.cat([z, a], dim=-1), h)
        return torch.tanh(self.to_latent(h)), h

    def reward(self, z):
        return self.reward_head(z).squeeze(-1)

    def value(self, z):
        return self.value_head(z).squeeze(-1)


def make_return_estimator(horizon: int, gamma: float):
    def estimate(rewards, bootstrap):
        discounts = gamma ** torch.arange(horizon + 1, device=rewards.device, dtype=rewards.dtype)  # expect: CG601
        return (discounts[:-1, None] * rewards).sum(0) + discounts[-1] * bootstrap

    def set_gamma(value: float):
        nonlocal gamma
        gamma = value

    return estimate, set_gamma


class GammaCurriculum:
    def __init__(self, on_change, start, end, iterations):
        self.on_change = on_change
        self.start, self.end, self.iterations = start, end, iterations

    def on_iteration(self, i):
        frac = min(1.0, i / max(1, self.iterations - 1))
        self.on_change(self.start + frac * (self.end - self.start))


class Imagination:
    def __init__(self, dynamics, actor, estimate, cfg: WorldModelConfig):
        self.dynamics, self.actor, self.estimate, self.cfg = dynamics, actor, estimate, cfg

    def __call__(self, z0, h0):
        z, h, rewards = z0, h0, []
        for _ in range(self.cfg.horizon):
            z, h = self.dynamics.step(z, h, torch.tanh(self.actor(z)))
            rewards.append(self.dynamics.reward(z))
        return self.estimate(torch.stack(rewards), self.dynamics.value(z))


class GraphedImagination:
    def __init__(self, imagine, z0, h0):
        self.z0, self.h0 = z0.clone(), h0.clone()
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(3):
                imagine(self.z0, self.h0)
        torch.cuda.current_stream().wait_stream(s)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self.returns = imagine(self.z0, self.h0)

    def __call__(self, z0, h0):
        self.z0.copy_(z0)
        self.h0.copy_(h0)
        self.graph.replay()
        return self.returns.clone()


def train_iterations(imagine_fn, curriculum, starts):
    outs = []
    for i, (z0, h0) in enumerate(starts):
        curriculum.on_iteration(i)
        outs.append(imagine_fn(z0, h0))
    return torch.stack(outs)


@torch.no_grad()
def main():
    torch.manual_seed(0)
    device = torch.device("cuda")
    cfg = WorldModelConfig()
    dynamics = LatentDynamics(cfg).to(device)
    actor = nn.Sequential(nn.Linear(cfg.latent, 64), nn.ELU(), nn.Linear(64, cfg.action)).to(device)
    starts = [(torch.randn(cfg.batch, cfg.latent, device=device).tanh(), torch.zeros(cfg.batch, cfg.hidden, device=device))
              for _ in range(cfg.iterations)]

    est, set_gamma = make_return_estimator(cfg.horizon, cfg.gamma_start)
    curriculum = GammaCurriculum(set_gamma, cfg.gamma_start, cfg.gamma_end, cfg.iterations)
    ref = train_iterations(Imagination(dynamics, actor, est, cfg), curriculum, starts)

    try:
        est, set_gamma = make_return_estimator(cfg.horizon, cfg.gamma_start)
        curriculum = GammaCurriculum(set_gamma, cfg.gamma_start, cfg.gamma_end, cfg.iterations)
        graphed = GraphedImagination(Imagination(dynamics, actor, est, cfg), *starts[0])
        out = train_iterations(graphed, curriculum, starts)
        torch.cuda.synchronize()
    except Exception as exc:  # noqa: BLE001
        print(f"graph path raised {type(exc).__name__}: {exc}")
        print("VERDICT: FAILS")
        return

    for i in range(cfg.iterations):
        print(f"iteration {i}: mean return graph={out[i].mean().item():.4f} eager={ref[i].mean().item():.4f}")
    ok = torch.allclose(out, ref, rtol=1e-4, atol=1e-4)
    print("VERDICT: OK" if ok else "VERDICT: DIVERGES")


if __name__ == "__main__":
    main()
