"""PPO update with the whole step (fwd, bwd, Adam) captured; entropy bonus annealed via an hparams dict."""
import copy

import torch
import torch.nn as nn

HPARAMS = {"clip": 0.2, "ent_coef": 0.1, "vf_coef": 0.5, "lr": 1e-3}


class Policy(nn.Module):
    def __init__(self, obs_dim=16, n_act=4, hidden=64):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(obs_dim, hidden), nn.Tanh(), nn.Linear(hidden, hidden), nn.Tanh())
        self.pi = nn.Linear(hidden, n_act)
        self.v = nn.Linear(hidden, 1)

    def forward(self, obs):
        h = self.body(obs)
        return self.pi(h), self.v(h).squeeze(-1)


class PPOTrainer:
    def __init__(self, policy, hparams):
        self.policy, self.hparams = policy, hparams
        self.opt = torch.optim.Adam(policy.parameters(), lr=hparams["lr"], capturable=True)

    def loss(self, obs, act, old_logp, adv, ret):
        logits, value = self.policy(obs)
        logp_all = torch.log_softmax(logits, dim=-1)
        entropy = -(logp_all.exp() * logp_all).sum(-1).mean()
        ratio = torch.exp(logp_all.gather(1, act[:, None]).squeeze(1) - old_logp)
        clip = self.hparams["clip"]
        pg = -torch.min(ratio * adv, ratio.clamp(1 - clip, 1 + clip) * adv).mean()
        vf = (value - ret).pow(2).mean()
        return pg + self.hparams["vf_coef"] * vf - self.hparams["ent_coef"] * entropy  # expect: CG601

    def train_step(self, batch):
        self.opt.zero_grad(set_to_none=True)
        loss = self.loss(*batch)
        loss.backward()
        self.opt.step()
        return loss


def make_batch(g, n=256, obs_dim=16, n_act=4):
    obs = torch.randn(n, obs_dim, device="cuda", generator=g)
    act = torch.randint(0, n_act, (n,), device="cuda", generator=g)
    old_logp = torch.full((n,), -1.386, device="cuda") + 0.05 * torch.randn(n, device="cuda", generator=g)
    return [obs, act, old_logp, torch.randn(n, device="cuda", generator=g), torch.randn(n, device="cuda", generator=g)]


def anneal(hparams, update, total):
    hparams["ent_coef"] = 0.1 * (1.0 - update / total)


def main():
    torch.manual_seed(0)
    torch.backends.cuda.matmul.allow_tf32 = False
    g = torch.Generator(device="cuda").manual_seed(11)
    warm_batch = make_batch(g)
    batches = [make_batch(g) for _ in range(8)]
    base = Policy().cuda()

    eager = PPOTrainer(copy.deepcopy(base), dict(HPARAMS))
    for _ in range(3):  # same three warm-up updates the graphed trainer does on its side stream
        eager.train_step(warm_batch)
    eager_losses = []
    for u, b in enumerate(batches):
        anneal(eager.hparams, u, len(batches))
        eager_losses.append(eager.train_step(b).detach().clone())

    try:
        trainer = PPOTrainer(copy.deepcopy(base), dict(HPARAMS))
        static_batch = [t.clone() for t in warm_batch]
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(3):
                trainer.train_step(static_batch)
        torch.cuda.current_stream().wait_stream(s)
        graph = torch.cuda.CUDAGraph()
        trainer.opt.zero_grad(set_to_none=True)
        with torch.cuda.graph(graph):
            static_loss = trainer.loss(*static_batch)
            static_loss.backward()
            trainer.opt.step()
        graph_losses = []
        for u, b in enumerate(batches):
            anneal(trainer.hparams, u, len(batches))
            for dst, src in zip(static_batch, b):
                dst.copy_(src)
            graph.replay()
            graph_losses.append(static_loss.clone())
        torch.cuda.synchronize()
    except Exception as exc:
        print("graphed run raised:", type(exc).__name__, (str(exc).splitlines() or [""])[0])
        print("VERDICT: FAILS")
        return
    diverged = False
    for u, (a, b) in enumerate(zip(eager_losses, graph_losses)):
        ok = torch.allclose(a, b, rtol=1e-4, atol=1e-5)
        print(f"update {u}: ent_coef={0.1 * (1 - u / 8):.4f} eager {a.item():+.5f} graphed {b.item():+.5f} match={ok}")
        diverged |= not ok
    print("VERDICT: DIVERGES" if diverged else "VERDICT: OK")


if __name__ == "__main__":
    main()
