from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class RerankConfig:
    dim: int = 64
    hidden: int = 128
    candidates: int = 16
    batch: int = 8
    queries: int = 6


class CandidateScorer(nn.Module):
    def __init__(self, cfg: RerankConfig):
        super().__init__()
        self.q_proj = nn.Linear(cfg.dim, cfg.dim)
        self.norm = nn.LayerNorm(cfg.dim)
        self.fc = nn.Linear(cfg.dim, cfg.hidden)
        self.out = nn.Linear(cfg.hidden, 1)

    def forward(self, query, cands):
        h = self.norm(cands + self.q_proj(query).unsqueeze(1))
        scores = self.out(F.gelu(self.fc(h))).squeeze(-1)
        return torch.log_softmax(scores, dim=-1)


class Reranker:
    def __init__(self, scorer, compile_graphs: bool):
        self.scorer = scorer
        self.fn = torch.compile(scorer, mode="reduce-overhead") if compile_graphs else scorer
        self.history = []

    def warmup(self, query, cands, iters: int = 3):
        for _ in range(iters):
            self.fn(query, cands)
        torch.cuda.synchronize()

    def score(self, query, cands):
        logp = self.fn(query, cands)
        self.history.append(logp.clone())
        return logp

    def top1(self):
        return [h.argmax(dim=-1) for h in self.history]


def make_requests(cfg: RerankConfig, device):
    return [(torch.randn(cfg.batch, cfg.dim, device=device),
             torch.randn(cfg.batch, cfg.candidates, cfg.dim, device=device))
            for _ in range(cfg.queries)]


@torch.no_grad()
def main():
    torch.manual_seed(0)
    torch.backends.cuda.matmul.allow_tf32 = False
    cfg, device = RerankConfig(), torch.device("cuda")
    scorer = CandidateScorer(cfg).to(device).eval()
    requests = make_requests(cfg, device)

    served = Reranker(scorer, compile_graphs=True)
    served.warmup(*requests[0])
    for query, cands in requests:
        served.score(query, cands)

    baseline = Reranker(scorer, compile_graphs=False)
    for query, cands in requests:
        baseline.score(query, cands)

    same = all(torch.allclose(a, b, atol=1e-4, rtol=1e-4)
               for a, b in zip(served.history, baseline.history))
    return "OK" if same else "DIVERGES"


if __name__ == "__main__":
    try:
        verdict = main()
    except Exception as exc:
        print(f"{type(exc).__name__}: {exc}", flush=True)
        verdict = "FAILS"
    print(f"VERDICT: {verdict}", flush=True)
