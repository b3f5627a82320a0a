import torch
import torch.nn as nn


class Head(nn.Module):
    def __init__(self, d=32, vocab=80):
        super().__init__()
        self.proj = nn.Linear(d, d)
        self.out = nn.Linear(d, vocab)

    def forward(self, h):
        return self.out(torch.tanh(self.proj(h)))


def tempered_probs(head, h, temperature, top_p_floor):
    logits = head(h) / temperature
    probs = torch.softmax(logits, dim=-1)
    probs = torch.where(probs < top_p_floor, torch.zeros_like(probs), probs)
    return probs / probs.sum(-1, keepdim=True)


class ProbGraphCache:
    def __init__(self, head, batch, d, floor=1e-3):
        self.head = head
        self.floor = floor
        self.h = torch.zeros(batch, d, device=next(head.parameters()).device)
        self.graphs = {}

    def _capture(self, temperature):
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(2):
                tempered_probs(self.head, self.h, temperature, self.floor)
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            out = tempered_probs(self.head, self.h, temperature, self.floor)
        return g, out

    def probs(self, h, temperature):
        key = round(float(temperature), 4)
        if key not in self.graphs:
            self.graphs[key] = self._capture(key)
        g, out = self.graphs[key]
        self.h.copy_(h)
        g.replay()
        return out.clone()


class Scheduler:
    def __init__(self, temps):
        self.temps = temps
        self.i = 0

    def next(self):
        t = self.temps[self.i % len(self.temps)]
        self.i += 1
        return t


def main():
    torch.manual_seed(0)
    head = Head().cuda().eval()
    hs = [torch.randn(6, 32, device="cuda") for _ in range(9)]
    temps = [1.0, 0.7, 1.3]
    with torch.no_grad():
        sched = Scheduler(temps)
        ref = [tempered_probs(head, h, round(sched.next(), 4), 1e-3) for h in hs]
        try:
            cache = ProbGraphCache(head, 6, 32)
            sched = Scheduler(temps)
            got = [cache.probs(h, sched.next()) for h in hs]
        except Exception as e:
            print(f"graph error: {type(e).__name__}: {str(e)[:300]}")
            print("VERDICT: FAILS")
            return
    print(f"graphs captured: {sorted(cache.graphs)}")
    ok = all(torch.allclose(r, g, rtol=1e-4, atol=1e-6) for r, g in zip(ref, got))
    print("VERDICT: OK" if ok else "VERDICT: DIVERGES")


if __name__ == "__main__":
    main()
