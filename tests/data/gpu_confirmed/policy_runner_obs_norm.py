from dataclasses import dataclass

import torch
import torch.nn as nn


@dataclass
class PolicyConfig:
    obs_dim: int = 24
    act_dim: int = 6
    hidden: int = 64
    n_envs: int = 8
    steps: int = 6


class RunningObsNorm:
    def __init__(self, mean, std, clip: float = 5.0):
        self.mean, self.std, self.clip = mean, std, clip

    def __call__(self, obs):
        return ((obs - self.mean) / self.std).clamp_(-self.clip, self.clip)


class GaussianPolicy(nn.Module):
    def __init__(self, cfg: PolicyConfig):
        super().__init__()
        self.trunk = nn.Sequential(nn.Linear(cfg.obs_dim, cfg.hidden), nn.ELU(),
                                   nn.Linear(cfg.hidden, cfg.hidden), nn.ELU())
        self.mu = nn.Linear(cfg.hidden, cfg.act_dim)
        self.log_std = nn.Parameter(torch.full((cfg.act_dim,), -0.5))

    def forward(self, obs):
        mu = torch.tanh(self.mu(self.trunk(obs)))
        return mu, self.log_std.exp().expand_as(mu)


class PolicyRunner:
    def __init__(self, policy, normalizer, example_obs):
        self.policy, self.normalizer = policy, normalizer
        self.static_obs = self.normalizer(example_obs)
        self.graph = torch.cuda.CUDAGraph()
        self._capture()

    def _capture(self):
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(3):
                self.policy(self.static_obs)
        torch.cuda.current_stream().wait_stream(s)
        with torch.cuda.graph(self.graph):
            self.static_mu, self.static_std = self.policy(self.static_obs)

    def act(self, obs):
        self.static_obs = self.normalizer(obs)  # expect: CG401
        self.graph.replay()
        return self.static_mu.clone(), self.static_std.clone()


def collect(act_fn, observations):
    means = []
    for obs in observations:
        mu, _ = act_fn(obs)
        means.append(mu)
    return means


@torch.no_grad()
def main():
    torch.manual_seed(0)
    torch.backends.cuda.matmul.allow_tf32 = False
    cfg, device = PolicyConfig(), torch.device("cuda")
    policy = GaussianPolicy(cfg).to(device).eval()
    normalizer = RunningObsNorm(torch.full((cfg.obs_dim,), 0.5, device=device),
                                torch.full((cfg.obs_dim,), 2.0, device=device))
    observations = [torch.randn(cfg.n_envs, cfg.obs_dim, device=device) * 3.0 + 0.5
                    for _ in range(cfg.steps + 1)]

    runner = PolicyRunner(policy, normalizer, observations[0])
    replayed = collect(runner.act, observations[1:])
    reference = collect(lambda o: policy(normalizer(o)), observations[1:])

    same = all(torch.allclose(a, b, atol=1e-4, rtol=1e-4) for a, b in zip(replayed, reference))
    return "OK" if same else "DIVERGES"


if __name__ == "__main__":
    try:
        verdict = main()
    except Exception as exc:
        print(f"{type(exc).__name__}: {exc}", flush=True)
        verdict = "FAILS"
    print(f"VERDICT: {verdict}", flush=True)
