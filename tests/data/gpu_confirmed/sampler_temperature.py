"""Decode-step serving engine: LM head + sampler probabilities captured once, replayed per request."""
from dataclasses import dataclass

import torch
import torch.nn as nn


@dataclass
class Request:
    rid: int
    temperature: float


class TinyLMHead(nn.Module):
    def __init__(self, hidden=64, vocab=256):
        super().__init__()
        self.proj = nn.Linear(hidden, hidden)
        self.norm = nn.LayerNorm(hidden)
        self.out = nn.Linear(hidden, vocab, bias=False)

    def forward(self, h):
        return self.out(self.norm(torch.nn.functional.gelu(self.proj(h))))


class Sampler:
    """Turns logits into a next-token distribution; the engine updates it per request."""

    def __init__(self, temperature=1.0):
        self.temperature = temperature

    def configure(self, req):
        self.temperature = req.temperature

    def probs(self, logits):
        return torch.softmax(logits / self.temperature, dim=-1)  # expect: CG601


class DecodeEngine:
    def __init__(self, model, sampler, batch, hidden):
        self.model = model
        self.sampler = sampler
        self.static_h = torch.zeros(batch, hidden, device="cuda")
        self.graph = None
        self.static_probs = None

    def _step(self, h):
        return self.sampler.probs(self.model(h))

    @torch.no_grad()
    def capture(self):
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(3):
                self._step(self.static_h)
        torch.cuda.current_stream().wait_stream(s)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self.static_probs = self._step(self.static_h)

    @torch.no_grad()
    def decode(self, req, h):
        self.sampler.configure(req)
        self.static_h.copy_(h)
        self.graph.replay()
        return self.static_probs.clone()


def main():
    torch.manual_seed(0)
    torch.backends.cuda.matmul.allow_tf32 = False
    batch, hidden = 4, 64
    model = TinyLMHead(hidden).cuda().eval()
    requests = [Request(i, t) for i, t in enumerate([1.0, 0.7, 1.3, 0.5, 2.0, 0.9])]
    hiddens = [torch.randn(batch, hidden, device="cuda") for _ in requests]

    ref_sampler = Sampler()
    eager = []
    with torch.no_grad():
        for req, h in zip(requests, hiddens):
            ref_sampler.configure(req)
            eager.append(ref_sampler.probs(model(h)))

    try:
        engine = DecodeEngine(model, Sampler(), batch, hidden)
        engine.capture()
        graphed = [engine.decode(req, h) for req, h in zip(requests, hiddens)]
        torch.cuda.synchronize()
    except Exception as exc:
        print("graphed run raised:", type(exc).__name__, (str(exc).splitlines() or [""])[0])
        print("VERDICT: FAILS")
        return

    diverged = False
    for req, pe, pg in zip(requests, eager, graphed):
        err = (pe - pg).abs().max().item()
        ok = torch.allclose(pe, pg, rtol=1e-4, atol=1e-6)
        print(f"request {req.rid} T={req.temperature}: max |eager - graphed| = {err:.3e} match={ok}")
        diverged |= not ok
    print("VERDICT: DIVERGES" if diverged else "VERDICT: OK")


if __name__ == "__main__":
    main()
