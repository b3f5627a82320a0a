import copy
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class CriticConfig:
    obs_dim: int = 20
    hidden: int = 64
    batch: int = 32
    lr: float = 3e-3
    gamma: float = 0.97
    updates: int = 6


class ValueNet(nn.Module):
    def __init__(self, cfg: CriticConfig):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(cfg.obs_dim, cfg.hidden), nn.Tanh(),
                                  nn.Linear(cfg.hidden, cfg.hidden), nn.Tanh())
        self.v = nn.Linear(cfg.hidden, 1)

    def forward(self, obs):
        return self.v(self.body(obs)).squeeze(-1)


class CriticLearner:
    def __init__(self, net, cfg: CriticConfig):
        self.net, self.cfg = net, cfg
        self.opt = torch.optim.Adam(net.parameters(), lr=cfg.lr, capturable=True)
        self.log = []

    def _targets(self, reward, next_value, done):
        return reward + self.cfg.gamma * (1.0 - done) * next_value

    def _maybe_log(self, loss, values):
        if not torch.cuda.is_current_stream_capturing():
            self.log.append({"loss": loss.item(), "v_std": values.std().item()})

    def update(self, obs, reward, next_value, done):
        values = self.net(obs)
        loss = F.smooth_l1_loss(values, self._targets(reward, next_value, done))
        self.opt.zero_grad(set_to_none=False)
        loss.backward()
        self.opt.step()
        self._maybe_log(loss, values)
        return loss.detach()


class CapturedUpdate:
    def __init__(self, learner: CriticLearner, batch):
        self.learner = learner
        self.static = [t.clone() for t in batch]
        self.graph = torch.cuda.CUDAGraph()
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(3):
                self.learner.update(*self.static)
        torch.cuda.current_stream().wait_stream(s)
        with torch.cuda.graph(self.graph):
            self.static_loss = self.learner.update(*self.static)

    def __call__(self, batch):
        for dst, src in zip(self.static, batch):
            dst.copy_(src)
        self.graph.replay()
        return self.static_loss.clone()


def make_batch(cfg, device):
    return (torch.randn(cfg.batch, cfg.obs_dim, device=device),
            torch.randn(cfg.batch, device=device),
            torch.randn(cfg.batch, device=device),
            (torch.rand(cfg.batch, device=device) < 0.1).float())


def main():
    torch.manual_seed(0)
    torch.backends.cuda.matmul.allow_tf32 = False
    cfg, device = CriticConfig(), torch.device("cuda")
    net = ValueNet(cfg).to(device)
    ref_net = copy.deepcopy(net)
    batches = [make_batch(cfg, device) for _ in range(cfg.updates + 1)]

    runner = CapturedUpdate(CriticLearner(net, cfg), batches[0])
    graph_losses = [runner(b) for b in batches[1:]]

    ref = CriticLearner(ref_net, cfg)
    for _ in range(3):
        ref.update(*batches[0])
    ref_losses = [ref.update(*b) for b in batches[1:]]

    close = lambda a, b: torch.allclose(a, b, atol=1e-4, rtol=1e-4)
    same = all(close(a, b) for a, b in zip(graph_losses, ref_losses))
    same = same and all(close(p, q) for p, q in zip(net.parameters(), ref_net.parameters()))
    return "OK" if same else "DIVERGES"


if __name__ == "__main__":
    try:
        verdict = main()
    except Exception as exc:
        print(f"{type(exc).__name__}: {exc}", flush=True)
        verdict = "FAILS"
    print(f"VERDICT: {verdict}", flush=True)
