"""On-policy actor with running observation normalisation and step-annealed action temperature, all inside a CUDA graph."""
from dataclasses import dataclass

import torch
import torch.nn as nn


@dataclass
class ActorConfig:
    obs_dim: int = 11
    n_actions: int = 5
    hidden: int = 64
    n_envs: int = 32
    rollout_len: int = 20
    temp_start: float = 2.0
    temp_decay_steps: float = 10.0


class RunningMeanStd(nn.Module):
    def __init__(self, shape, eps=1e-4):
        super().__init__()
        self.register_buffer("mean", torch.zeros(shape))
        self.register_buffer("var", torch.ones(shape))
        self.register_buffer("count", torch.full((), eps))

    def update(self, x):
        n = x.shape[0]
        batch_mean, batch_var = x.mean(0), x.var(0, unbiased=False)
        delta = batch_mean - self.mean
        total = self.count + n
        m2 = self.var * self.count + batch_var * n + delta.pow(2) * self.count * n / total
        self.mean.add_(delta * n / total)
        self.var.copy_(m2 / total)
        self.count.copy_(total)

    def normalize(self, x):
        return ((x - self.mean) / torch.sqrt(self.var + 1e-8)).clamp(-10.0, 10.0)


class Actor(nn.Module):
    def __init__(self, cfg: ActorConfig):
        super().__init__()
        self.cfg = cfg
        self.obs_rms = RunningMeanStd(cfg.obs_dim)
        self.net = nn.Sequential(nn.Linear(cfg.obs_dim, cfg.hidden), nn.Tanh(), nn.Linear(cfg.hidden, cfg.n_actions))
        self.register_buffer("env_steps", torch.zeros(()))

    def temperature(self):
        return 1.0 + (self.cfg.temp_start - 1.0) * torch.exp(-self.env_steps / self.cfg.temp_decay_steps)

    def forward(self, obs):
        self.obs_rms.update(obs)
        logits = self.net(self.obs_rms.normalize(obs)) / self.temperature()
        self.env_steps.add_(1.0)
        return torch.log_softmax(logits, dim=-1)


class GraphedActor:
    def __init__(self, actor: Actor, example):
        self.actor = actor
        snapshot = {k: v.clone() for k, v in actor.state_dict().items()}
        self.static_obs = example.clone()
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(3):
                actor(self.static_obs)
        torch.cuda.current_stream().wait_stream(s)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self.static_logp = actor(self.static_obs)
        for k, v in actor.state_dict().items():
            v.copy_(snapshot[k])

    def __call__(self, obs):
        self.static_obs.copy_(obs)
        self.graph.replay()
        return self.static_logp.clone()


def drifting_observations(cfg: ActorConfig, device):
    drift = torch.linspace(0.0, 3.0, cfg.rollout_len, device=device)
    scale = torch.rand(cfg.obs_dim, device=device) * 4 + 0.5
    return [scale * torch.randn(cfg.n_envs, cfg.obs_dim, device=device) + drift[t] for t in range(cfg.rollout_len)]


@torch.no_grad()
def main():
    torch.manual_seed(0)
    device = torch.device("cuda")
    cfg = ActorConfig()
    actor = Actor(cfg).to(device)
    initial = {k: v.clone() for k, v in actor.state_dict().items()}
    observations = drifting_observations(cfg, device)

    ref = torch.stack([actor(o) for o in observations])
    ref_stats = (actor.obs_rms.mean.clone(), actor.obs_rms.var.clone(), actor.env_steps.item())
    actor.load_state_dict(initial)

    try:
        graphed = GraphedActor(actor, observations[0])
        out = torch.stack([graphed(o) for o in observations])
        torch.cuda.synchronize()
    except Exception as exc:  # noqa: BLE001
        print(f"graph path raised {type(exc).__name__}: {exc}")
        print("VERDICT: FAILS")
        return

    stats_ok = (torch.allclose(actor.obs_rms.mean, ref_stats[0], rtol=1e-4, atol=1e-5)
                and torch.allclose(actor.obs_rms.var, ref_stats[1], rtol=1e-4, atol=1e-5))
    print(f"env steps graph={actor.env_steps.item():.0f} eager={ref_stats[2]:.0f}, running stats match: {stats_ok}")
    print(f"max |log-prob diff| = {(out - ref).abs().max().item():.3e}")
    ok = stats_ok and actor.env_steps.item() == ref_stats[2] and torch.allclose(out, ref, rtol=1e-4, atol=1e-5)
    print("VERDICT: OK" if ok else "VERDICT: DIVERGES")


if __name__ == "__main__":
    main()
