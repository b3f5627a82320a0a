import torch
import torch.nn as nn


class RunningObsNorm(nn.Module):
    def __init__(self, dim, momentum=0.05, clip=5.0):
        super().__init__()
        self.momentum = momentum
        self.clip = clip
        self.frozen = False
        self.register_buffer("mean", torch.zeros(dim))
        self.register_buffer("var", torch.ones(dim))

    def _update(self, x):
        m = self.momentum
        self.mean.mul_(1 - m).add_(x.mean(0), alpha=m)
        self.var.mul_(1 - m).add_(x.var(0, correction=0), alpha=m)

    def forward(self, x):
        if not self.frozen:  # expect: CG202
            self._update(x)
        return ((x - self.mean) * torch.rsqrt(self.var + 1e-8)).clamp(-self.clip, self.clip)


class ActorCritic(nn.Module):
    def __init__(self, obs_dim=10, act_dim=3):
        super().__init__()
        self.norm = RunningObsNorm(obs_dim)
        self.pi = nn.Sequential(nn.Linear(obs_dim, 64), nn.Tanh(), nn.Linear(64, act_dim))
        self.v = nn.Sequential(nn.Linear(obs_dim, 64), nn.Tanh(), nn.Linear(64, 1))

    def forward(self, obs):
        z = self.norm(obs)
        return self.pi(z), self.v(z).squeeze(-1)

    def freeze_normalizer(self):
        self.norm.frozen = True


class GraphedActor:
    def __init__(self, model, n_envs, obs_dim, device):
        self.model = model
        self.obs = torch.zeros(n_envs, obs_dim, device=device)

    def build(self):
        saved = {k: v.clone() for k, v in self.model.state_dict().items()}
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(3):
                self.model(self.obs)
        torch.cuda.current_stream().wait_stream(s)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self.logits, self.value = self.model(self.obs)
        self.model.load_state_dict(saved)

    def act(self, obs):
        self.obs.copy_(obs)
        self.graph.replay()
        return self.logits.argmax(-1), self.value.clone()


def eager_policy(model):
    def act(obs):
        logits, value = model(obs)
        return logits.argmax(-1), value
    return act


def run(policy_fn, model, obs_seq, freeze_at):
    actions, values = [], []
    for i, obs in enumerate(obs_seq):
        if i == freeze_at:
            model.freeze_normalizer()
        a, v = policy_fn(obs)
        actions.append(a)
        values.append(v)
    return torch.stack(actions), torch.stack(values)


def main():
    torch.manual_seed(0)
    dev = torch.device("cuda")
    obs_seq = [torch.randn(32, 10, device=dev) * (1 + 0.2 * i) + 0.3 * i for i in range(20)]
    m_eager = ActorCritic().to(dev).eval()
    m_graph = ActorCritic().to(dev).eval()
    m_graph.load_state_dict(m_eager.state_dict())

    with torch.no_grad():
        ref_a, ref_v = run(eager_policy(m_eager), m_eager, obs_seq, 8)
        try:
            actor = GraphedActor(m_graph, 32, 10, dev)
            actor.build()
            got_a, got_v = run(actor.act, m_graph, obs_seq, 8)
        except Exception as e:
            print(f"graph error: {type(e).__name__}: {str(e)[:300]}")
            print("VERDICT: FAILS")
            return
    agree = (ref_a == got_a).float().mean().item()
    print(f"action agreement {agree:.3f}")
    ok = torch.allclose(ref_v, got_v, rtol=1e-4, atol=1e-5) and torch.allclose(m_eager.norm.mean, m_graph.norm.mean, atol=1e-5)
    print("VERDICT: OK" if ok else "VERDICT: DIVERGES")


if __name__ == "__main__":
    main()
