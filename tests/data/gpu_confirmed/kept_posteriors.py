"""ASR-style frame posterior evaluation: replay a captured encoder per batch and gather the posteriors."""
from dataclasses import dataclass, field

import torch
import torch.nn as nn


@dataclass
class EvalState:
    posteriors: list = field(default_factory=list)
    n_batches: int = 0

    def collect(self, post):
        self.posteriors.append(post)
        self.n_batches += 1

    def frame_error_rate(self, targets):
        pred = torch.cat(self.posteriors).argmax(-1)
        return (pred != torch.cat(targets)).float().mean().item()


class ConformerLite(nn.Module):
    def __init__(self, n_mels=32, d=96, vocab=29):
        super().__init__()
        self.inp = nn.Linear(n_mels, d)
        self.ff = nn.Sequential(nn.LayerNorm(d), nn.Linear(d, 2 * d), nn.SiLU(), nn.Linear(2 * d, d))
        self.out = nn.Linear(d, vocab)

    def forward(self, feats):
        h = self.inp(feats)
        h = h + 0.5 * self.ff(h)
        return self.out(h).log_softmax(-1)


class GraphedEncoder:
    def __init__(self, model, example):
        self.model = model
        self.static_feats = example.clone()
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.no_grad(), torch.cuda.stream(s):
            for _ in range(3):
                model(self.static_feats)
        torch.cuda.current_stream().wait_stream(s)
        self.graph = torch.cuda.CUDAGraph()
        with torch.no_grad(), torch.cuda.graph(self.graph):
            self.static_post = model(self.static_feats)

    def __call__(self, feats):
        self.static_feats.copy_(feats)
        self.graph.replay()
        return self.static_post


def main():
    torch.manual_seed(0)
    torch.backends.cuda.matmul.allow_tf32 = False
    batch, frames, n_mels, vocab = 4, 20, 32, 29
    model = ConformerLite(n_mels, vocab=vocab).cuda().eval()
    feats = [torch.randn(batch, frames, n_mels, device="cuda") for _ in range(5)]
    targets = [torch.randint(0, vocab, (batch, frames), device="cuda") for _ in feats]

    eager_state = EvalState()
    with torch.no_grad():
        for x in feats:
            eager_state.collect(model(x))

    try:
        encoder = GraphedEncoder(model, feats[0])
        graph_state = EvalState()
        for x in feats:
            graph_state.collect(encoder(x))  # expect: CG955
        torch.cuda.synchronize()
    except Exception as exc:
        print("graphed run raised:", type(exc).__name__, (str(exc).splitlines() or [""])[0])
        print("VERDICT: FAILS")
        return
    diverged = False
    for i, (a, b) in enumerate(zip(eager_state.posteriors, graph_state.posteriors)):
        ok = torch.allclose(a, b, rtol=1e-4, atol=1e-5)
        print(f"batch {i}: max diff {(a - b).abs().max().item():.3e} match={ok}")
        diverged |= not ok
    print(f"FER eager {eager_state.frame_error_rate(targets):.3f} graphed {graph_state.frame_error_rate(targets):.3f}")
    print("VERDICT: DIVERGES" if diverged else "VERDICT: OK")


if __name__ == "__main__":
    main()
