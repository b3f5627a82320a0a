"""Two-tower candidate ranking with live experiment arms; the scoring pass for a request batch is CUDA-graphed."""
from dataclasses import dataclass, field

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class RankerConfig:
    user_features: int = 48
    n_items: int = 512
    dim: int = 32
    batch: int = 64
    top_k: int = 10


ARMS = {
    "control": {"temperature": 1.0, "freshness_weight": 0.0},
    "fresh_boost": {"temperature": 1.0, "freshness_weight": 0.6},
    "sharp": {"temperature": 0.5, "freshness_weight": 0.2},
}


@dataclass
class ExperimentState:
    arm: str = "control"
    knobs: dict = field(default_factory=lambda: dict(ARMS["control"]))


@dataclass
class RuntimeContext:
    region: str = "eu-west"
    experiment: ExperimentState = field(default_factory=ExperimentState)


class ExperimentManager:
    def __init__(self, ctx: RuntimeContext):
        self.ctx = ctx

    def assign(self, arm: str):
        self.ctx.experiment.arm = arm
        self.ctx.experiment.knobs.update(ARMS[arm])


class TwoTowerRanker(nn.Module):
    def __init__(self, cfg: RankerConfig, runtime: RuntimeContext):
        super().__init__()
        self.top_k = cfg.top_k
        self.runtime = runtime
        self.user_tower = nn.Sequential(nn.Linear(cfg.user_features, 64), nn.ReLU(), nn.Linear(64, cfg.dim))
        self.item_emb = nn.Embedding(cfg.n_items, cfg.dim)
        self.register_buffer("freshness", torch.rand(cfg.n_items))

    def score(self, user_feats):
        u = F.normalize(self.user_tower(user_feats), dim=-1)
        v = F.normalize(self.item_emb.weight, dim=-1)
        knobs = self.runtime.experiment.knobs
        return (u @ v.t()) / knobs["temperature"] + knobs["freshness_weight"] * self.freshness  # expect: CG601

    def forward(self, user_feats):
        top = self.score(user_feats).topk(self.top_k, dim=-1)
        return top.values, top.indices


class GraphedRanker:
    def __init__(self, model, example):
        self.static_users = example.clone()
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(3):
                model(self.static_users)
        torch.cuda.current_stream().wait_stream(s)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self.static_values, self.static_indices = model(self.static_users)

    def __call__(self, users):
        self.static_users.copy_(users)
        self.graph.replay()
        return self.static_values.clone(), self.static_indices.clone()


def serve(rank, manager, traffic):
    results = []
    for arm, users in traffic:
        manager.assign(arm)
        results.append(rank(users))
    manager.assign("control")
    return results


@torch.no_grad()
def main():
    torch.manual_seed(0)
    device = torch.device("cuda")
    cfg = RankerConfig()
    runtime = RuntimeContext()
    manager = ExperimentManager(runtime)
    model = TwoTowerRanker(cfg, runtime).to(device).eval()
    arms = ["control", "fresh_boost", "sharp", "fresh_boost", "control"]
    traffic = [(arm, torch.randn(cfg.batch, cfg.user_features, device=device)) for arm in arms]

    reference = serve(model, manager, traffic)

    try:
        ranker = GraphedRanker(model, traffic[0][1])
        results = serve(ranker, manager, traffic)
        torch.cuda.synchronize()
    except Exception as exc:  # noqa: BLE001
        print(f"graph path raised {type(exc).__name__}: {exc}")
        print("VERDICT: FAILS")
        return

    ok = True
    for (arm, _), (vals, idx), (rvals, ridx) in zip(traffic, results, reference):
        overlap = (idx.sort(-1).values == ridx.sort(-1).values).float().mean().item()
        print(f"{arm:>12}: max |score diff| = {(vals - rvals).abs().max().item():.3e}, id agreement {overlap:.2f}")
        ok = ok and torch.allclose(vals, rvals, rtol=1e-4, atol=1e-4)
    print("VERDICT: OK" if ok else "VERDICT: DIVERGES")


if __name__ == "__main__":
    main()
