"""Batched TD(0) target computation for a DQN-style critic, graphed for the learner loop."""
from dataclasses import dataclass

import torch
import torch.nn as nn


@dataclass
class LearnerConfig:
    obs_dim: int = 12
    n_actions: int = 4
    batch: int = 64
    gamma: float = 0.99


def _checked(t: torch.Tensor, what: str) -> torch.Tensor:
    if not torch.isfinite(t).all():  # expect: CG201
        raise FloatingPointError(f"non-finite values in {what}")
    return t


class QNetwork(nn.Module):
    def __init__(self, cfg: LearnerConfig):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(cfg.obs_dim, 64), nn.ReLU(), nn.Linear(64, cfg.n_actions))

    def forward(self, obs):
        return self.body(obs)


class TDTargets:
    def __init__(self, target_net: QNetwork, cfg: LearnerConfig):
        self.net, self.gamma = target_net, cfg.gamma

    def __call__(self, rewards, next_obs, dones):
        q_next = _checked(self.net(next_obs), "target q-values")
        v_next = q_next.max(-1).values
        return rewards + self.gamma * (1.0 - dones) * v_next


class GraphedTargets:
    def __init__(self, td: TDTargets, cfg: LearnerConfig, device):
        self.td = td
        self.rewards = torch.zeros(cfg.batch, device=device)
        self.next_obs = torch.zeros(cfg.batch, cfg.obs_dim, device=device)
        self.dones = torch.zeros(cfg.batch, device=device)
        self.graph = torch.cuda.CUDAGraph()

    def capture(self):
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(3):
                self.td(self.rewards, self.next_obs, self.dones)
        torch.cuda.current_stream().wait_stream(s)
        with torch.cuda.graph(self.graph):
            self.static_targets = self.td(self.rewards, self.next_obs, self.dones)

    def __call__(self, rewards, next_obs, dones):
        self.rewards.copy_(rewards)
        self.next_obs.copy_(next_obs)
        self.dones.copy_(dones)
        self.graph.replay()
        return self.static_targets.clone()


@torch.no_grad()
def main():
    torch.manual_seed(0)
    cfg, device = LearnerConfig(), "cuda"
    td = TDTargets(QNetwork(cfg).to(device).eval(), cfg)
    batches = [
        (torch.randn(cfg.batch, device=device),
         torch.randn(cfg.batch, cfg.obs_dim, device=device),
         (torch.rand(cfg.batch, device=device) < 0.1).float())
        for _ in range(4)
    ]
    ref = torch.stack([td(*b) for b in batches])
    try:
        runner = GraphedTargets(td, cfg, device)
        runner.capture()
        out = torch.stack([runner(*b) for b in batches])
        torch.cuda.synchronize()
    except Exception as exc:
        print(f"graph error: {type(exc).__name__}: {exc}")
        print("VERDICT: FAILS")
        return
    print(f"max |diff| = {(out - ref).abs().max().item():.3e}")
    print("VERDICT: OK" if torch.allclose(out, ref, rtol=1e-4, atol=1e-5) else "VERDICT: DIVERGES")


if __name__ == "__main__":
    main()
