"""DQN target computation; the discount follows a schedule, and one graph is captured per discount value."""
import torch
import torch.nn as nn


class QNet(nn.Module):
    def __init__(self, obs_dim=12, n_actions=5, hidden=64):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(obs_dim, hidden), nn.ReLU(), nn.Linear(hidden, n_actions))

    def forward(self, obs):
        return self.net(obs)


class TDTarget(nn.Module):
    def __init__(self, target_net, gamma):
        super().__init__()
        self.target_net = target_net
        self.gamma = gamma

    def forward(self, reward, next_obs, done):
        next_q = self.target_net(next_obs).max(dim=-1).values
        return reward + self.gamma * (1.0 - done) * next_q


class TargetGraphCache:
    """Re-captures whenever the discount changes; graphs are keyed by the exact gamma they baked in."""

    def __init__(self, td, batch, obs_dim):
        self.td = td
        self.static = [torch.zeros(batch, device="cuda"), torch.zeros(batch, obs_dim, device="cuda"),
                       torch.zeros(batch, device="cuda")]
        self.graphs = {}

    @torch.no_grad()
    def _capture(self, gamma):
        self.td.gamma = gamma
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(2):
                self.td(*self.static)
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            out = self.td(*self.static)
        self.graphs[gamma] = (g, out)

    def __call__(self, gamma, reward, next_obs, done):
        if gamma not in self.graphs:
            self._capture(gamma)
        for dst, src in zip(self.static, (reward, next_obs, done)):
            dst.copy_(src)
        graph, out = self.graphs[gamma]
        graph.replay()
        return out.clone()


def gamma_schedule(step):
    return 0.9 if step < 3 else (0.97 if step < 6 else 0.9)


def main():
    torch.manual_seed(0)
    torch.backends.cuda.matmul.allow_tf32 = False
    batch, obs_dim = 64, 12
    target_net = QNet(obs_dim).cuda().eval()
    g = torch.Generator(device="cuda").manual_seed(4)
    transitions = [(torch.randn(batch, device="cuda", generator=g),
                    torch.randn(batch, obs_dim, device="cuda", generator=g),
                    (torch.rand(batch, device="cuda", generator=g) < 0.1).float()) for _ in range(8)]

    td = TDTarget(target_net, gamma=0.9)
    eager = []
    with torch.no_grad():
        for step, tr in enumerate(transitions):
            td.gamma = gamma_schedule(step)
            eager.append(td(*tr))
    try:
        cache = TargetGraphCache(TDTarget(target_net, gamma=0.9), batch, obs_dim)
        graphed = [cache(gamma_schedule(step), *tr) for step, tr in enumerate(transitions)]
        torch.cuda.synchronize()
    except Exception as exc:
        print("graphed run raised:", type(exc).__name__, (str(exc).splitlines() or [""])[0])
        print("VERDICT: FAILS")
        return
    diverged = False
    for step, (a, b) in enumerate(zip(eager, graphed)):
        ok = torch.allclose(a, b, rtol=1e-4, atol=1e-5)
        print(f"step {step}: gamma={gamma_schedule(step)} max diff {(a - b).abs().max().item():.3e} match={ok}")
        diverged |= not ok
    print(f"graphs captured: {sorted(cache.graphs)}")
    print("VERDICT: DIVERGES" if diverged else "VERDICT: OK")


if __name__ == "__main__":
    main()
