"""Cross-attention reranker served through a CUDA-graph runner; scalar knobs are fixed at construction."""
from dataclasses import dataclass

import torch
import torch.nn as nn


@dataclass(frozen=True)
class ModelConfig:
    dim: int = 64
    n_heads: int = 4
    logit_softcap: float = 30.0
    score_temperature: float = 0.7


class SoftcapCrossAttention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.n_heads = cfg.n_heads
        self.head_dim = cfg.dim // cfg.n_heads
        self.scale = self.head_dim ** -0.5
        self.softcap = cfg.logit_softcap
        self.q = nn.Linear(cfg.dim, cfg.dim)
        self.kv = nn.Linear(cfg.dim, 2 * cfg.dim)

    def forward(self, query, docs):
        b, n, _ = docs.shape
        q = self.q(query).view(b, self.n_heads, 1, self.head_dim)
        k, v = self.kv(docs).view(b, n, 2, self.n_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        logits = (q @ k.transpose(-1, -2)) * self.scale
        logits = self.softcap * torch.tanh(logits / self.softcap)
        return (logits.softmax(-1) @ v).reshape(b, -1)


class Reranker(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.attn = SoftcapCrossAttention(cfg)
        self.score = nn.Linear(cfg.dim, 1)
        self.temperature = cfg.score_temperature

    def forward(self, query, docs):
        pooled = self.attn(query, docs)
        doc_scores = (docs @ pooled.unsqueeze(-1)).squeeze(-1) + self.score(docs).squeeze(-1)
        return (doc_scores / self.temperature).softmax(-1)


class RerankRunner:
    def __init__(self, model, batch, n_docs, dim):
        self.model = model
        self.static_q = torch.zeros(batch, dim, device="cuda")
        self.static_docs = torch.zeros(batch, n_docs, dim, device="cuda")
        self.calls = 0

    @torch.no_grad()
    def capture(self):
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(3):
                self.model(self.static_q, self.static_docs)
        torch.cuda.current_stream().wait_stream(s)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self.static_scores = self.model(self.static_q, self.static_docs)

    def __call__(self, query, docs):
        self.static_q.copy_(query)
        self.static_docs.copy_(docs)
        self.graph.replay()
        self.calls += 1
        return self.static_scores.clone()


def main():
    torch.manual_seed(0)
    torch.backends.cuda.matmul.allow_tf32 = False
    cfg = ModelConfig()
    batch, n_docs = 4, 12
    model = Reranker(cfg).cuda().eval()
    requests = [(torch.randn(batch, cfg.dim, device="cuda"), torch.randn(batch, n_docs, cfg.dim, device="cuda"))
                for _ in range(6)]
    with torch.no_grad():
        eager = [model(q, d) for q, d in requests]
    try:
        runner = RerankRunner(model, batch, n_docs, cfg.dim)
        runner.capture()
        graphed = [runner(q, d) for q, d in requests]
        torch.cuda.synchronize()
    except Exception as exc:
        print("graphed run raised:", type(exc).__name__, (str(exc).splitlines() or [""])[0])
        print("VERDICT: FAILS")
        return
    diverged = False
    for i, (a, b) in enumerate(zip(eager, graphed)):
        ok = torch.allclose(a, b, rtol=1e-4, atol=1e-6)
        print(f"request {i}: max diff {(a - b).abs().max().item():.3e} match={ok}")
        diverged |= not ok
    print(f"served {runner.calls} requests")
    print("VERDICT: DIVERGES" if diverged else "VERDICT: OK")


if __name__ == "__main__":
    main()
