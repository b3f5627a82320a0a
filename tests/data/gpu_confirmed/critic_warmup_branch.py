"""Actor-critic learner: the first updates train only the critic; fwd+bwd is CUDA-graph captured."""
import copy
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class A2CConfig:
    obs_dim: int = 24
    n_actions: int = 6
    hidden: int = 64
    batch: int = 128
    lr: float = 3e-3
    vf_coef: float = 0.5
    critic_warmup_updates: int = 3
    total_updates: int = 8


class ActorCritic(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.trunk = nn.Sequential(nn.Linear(cfg.obs_dim, cfg.hidden), nn.Tanh())
        self.pi = nn.Linear(cfg.hidden, cfg.n_actions)
        self.v = nn.Linear(cfg.hidden, 1)

    def forward(self, obs):
        h = self.trunk(obs)
        return self.pi(h), self.v(h).squeeze(-1)


class Learner:
    def __init__(self, net, cfg):
        self.net, self.cfg = net, cfg
        self.opt = torch.optim.SGD(net.parameters(), lr=cfg.lr)
        self.num_updates = 0

    def compute_loss(self, obs, actions, returns, adv):
        logits, values = self.net(obs)
        value_loss = F.mse_loss(values, returns)
        if self.num_updates < self.cfg.critic_warmup_updates:  # expect: CG202
            return self.cfg.vf_coef * value_loss
        logp = torch.log_softmax(logits, -1).gather(1, actions[:, None]).squeeze(1)
        return -(logp * adv).mean() + self.cfg.vf_coef * value_loss

    def finish_update(self):
        self.opt.step()
        self.num_updates += 1


def rollout_batches(cfg, n):
    g = torch.Generator(device="cuda").manual_seed(7)
    out = []
    for _ in range(n):
        obs = torch.randn(cfg.batch, cfg.obs_dim, device="cuda", generator=g)
        act = torch.randint(0, cfg.n_actions, (cfg.batch,), device="cuda", generator=g)
        ret = torch.randn(cfg.batch, device="cuda", generator=g)
        out.append((obs, act, ret, ret - ret.mean()))
    return out


def main():
    torch.manual_seed(0)
    torch.backends.cuda.matmul.allow_tf32 = False
    cfg = A2CConfig()
    base = ActorCritic(cfg).cuda()
    batches = rollout_batches(cfg, cfg.total_updates)

    eager = Learner(copy.deepcopy(base), cfg)
    eager_log = []
    for b in batches:
        eager.opt.zero_grad(set_to_none=True)
        loss = eager.compute_loss(*b)
        loss.backward()
        eager_log.append((loss.detach().clone(), eager.net.trunk[0].weight.grad.clone()))
        eager.finish_update()

    try:
        learner = Learner(copy.deepcopy(base), cfg)
        static = [t.clone() for t in batches[0]]
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(3):
                learner.opt.zero_grad(set_to_none=True)
                learner.compute_loss(*static).backward()
        torch.cuda.current_stream().wait_stream(s)
        learner.opt.zero_grad(set_to_none=True)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            static_loss = learner.compute_loss(*static)
            static_loss.backward()
        graph_log = []
        for b in batches:
            for dst, src in zip(static, b):
                dst.copy_(src)
            graph.replay()
            graph_log.append((static_loss.clone(), learner.net.trunk[0].weight.grad.clone()))
            learner.finish_update()
        torch.cuda.synchronize()
    except Exception as exc:
        print("graphed run raised:", type(exc).__name__, (str(exc).splitlines() or [""])[0])
        print("VERDICT: FAILS")
        return
    diverged = False
    for i, ((le, ge), (lg, gg)) in enumerate(zip(eager_log, graph_log)):
        ok = torch.allclose(le, lg, rtol=1e-4, atol=1e-5) and torch.allclose(ge, gg, rtol=1e-3, atol=1e-6)
        print(f"update {i}: eager loss {le.item():+.5f} graphed loss {lg.item():+.5f} match={ok}")
        diverged |= not ok
    print("VERDICT: DIVERGES" if diverged else "VERDICT: OK")


if __name__ == "__main__":
    main()
