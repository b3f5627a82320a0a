"""Soft actor-critic: the entropy-regularised TD target is computed by a captured CUDA graph per minibatch."""
import math
from dataclasses import dataclass

import torch
import torch.nn as nn


@dataclass
class SACConfig:
    obs_dim: int = 17
    act_dim: int = 6
    hidden: int = 128
    batch: int = 256
    gamma: float = 0.99
    init_alpha: float = 0.2
    alpha_lr: float = 0.05
    updates: int = 6


def mlp(inp, out, hidden):
    return nn.Sequential(nn.Linear(inp, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, out))


class TanhGaussianPolicy(nn.Module):
    def __init__(self, cfg: SACConfig):
        super().__init__()
        self.net = mlp(cfg.obs_dim, 2 * cfg.act_dim, cfg.hidden)

    def forward(self, obs, eps):
        mu, log_std = self.net(obs).chunk(2, dim=-1)
        log_std = log_std.clamp(-5.0, 2.0)
        action = torch.tanh(mu + log_std.exp() * eps)
        logp = (-0.5 * eps.pow(2) - log_std - 0.5 * math.log(2 * math.pi)).sum(-1)
        return action, logp - torch.log1p(-action.pow(2) + 1e-6).sum(-1)


class TwinQ(nn.Module):
    def __init__(self, cfg: SACConfig):
        super().__init__()
        self.q1, self.q2 = (mlp(cfg.obs_dim + cfg.act_dim, 1, cfg.hidden) for _ in range(2))

    def forward(self, obs, act):
        x = torch.cat([obs, act], dim=-1)
        return self.q1(x).squeeze(-1), self.q2(x).squeeze(-1)


class EntropyTemperature:
    """Dual ascent on log(alpha) toward a target policy entropy, kept on the host."""

    def __init__(self, init_alpha, target_entropy, lr):
        self.log_alpha, self.target_entropy, self.lr = math.log(init_alpha), target_entropy, lr

    @property
    def alpha(self) -> float:
        return math.exp(self.log_alpha)

    def update(self, mean_logp: float):
        self.log_alpha += self.lr * (mean_logp + self.target_entropy)


class SoftTarget:
    def __init__(self, policy, q_target, temperature, gamma):
        self.policy, self.q_target = policy, q_target
        self.temperature, self.gamma = temperature, gamma

    def __call__(self, batch):
        next_action, next_logp = self.policy(batch["next_obs"], batch["eps"])
        q1, q2 = self.q_target(batch["next_obs"], next_action)
        soft_value = torch.min(q1, q2) - self.temperature.alpha * next_logp  # expect: CG601
        target = batch["reward"] + self.gamma * (1.0 - batch["done"]) * soft_value
        return target, next_logp.mean()


class GraphedTarget:
    def __init__(self, fn, example):
        self.static = {k: v.clone() for k, v in example.items()}
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(3):
                fn(self.static)
        torch.cuda.current_stream().wait_stream(s)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self.static_target, self.static_logp = fn(self.static)

    def __call__(self, batch):
        for k, v in batch.items():
            self.static[k].copy_(v)
        self.graph.replay()
        return self.static_target.clone(), self.static_logp.clone()


def run(target_fn, temperature, batches):
    targets = []
    for b in batches:
        target, mean_logp = target_fn(b)
        temperature.update(mean_logp.item())
        targets.append(target)
    return torch.stack(targets)


def make_batch(cfg, device):
    return {"next_obs": torch.randn(cfg.batch, cfg.obs_dim, device=device),
            "eps": torch.randn(cfg.batch, cfg.act_dim, device=device),
            "reward": torch.randn(cfg.batch, device=device),
            "done": (torch.rand(cfg.batch, device=device) < 0.05).float()}


@torch.no_grad()
def main():
    torch.manual_seed(0)
    device = torch.device("cuda")
    cfg = SACConfig()
    policy, q_target = TanhGaussianPolicy(cfg).to(device), TwinQ(cfg).to(device)
    batches = [make_batch(cfg, device) for _ in range(cfg.updates)]

    eager_temp = EntropyTemperature(cfg.init_alpha, -float(cfg.act_dim), cfg.alpha_lr)
    ref = run(SoftTarget(policy, q_target, eager_temp, cfg.gamma), eager_temp, batches)

    try:
        temp = EntropyTemperature(cfg.init_alpha, -float(cfg.act_dim), cfg.alpha_lr)
        graphed = GraphedTarget(SoftTarget(policy, q_target, temp, cfg.gamma), batches[0])
        out = run(graphed, temp, batches)
        torch.cuda.synchronize()
    except Exception as exc:  # noqa: BLE001
        print(f"graph path raised {type(exc).__name__}: {exc}")
        print("VERDICT: FAILS")
        return

    print(f"alpha after updates: graph-side {temp.alpha:.4f}, eager-side {eager_temp.alpha:.4f}")
    print("max |target diff| per update:", [f"{v:.2e}" for v in (out - ref).abs().amax(dim=1).tolist()])
    ok = torch.allclose(out, ref, rtol=1e-4, atol=1e-4)
    print("VERDICT: OK" if ok else "VERDICT: DIVERGES")


if __name__ == "__main__":
    main()
