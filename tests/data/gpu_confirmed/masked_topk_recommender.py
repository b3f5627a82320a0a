import torch
import torch.nn as nn


class TwoTower(nn.Module):
    def __init__(self, n_items=128, d=32, d_user=24):
        super().__init__()
        self.items = nn.Embedding(n_items, d)
        self.user = nn.Sequential(nn.Linear(d_user, 64), nn.ReLU(), nn.Linear(64, d))

    def scores(self, user_feats):
        return self.user(user_feats) @ self.items.weight.t()


class Retriever:
    def __init__(self, model, batch, d_user, n_items, k=5, device="cuda"):
        self.model = model
        self.k = k
        self.user = torch.zeros(batch, d_user, device=device)
        self.seen = torch.zeros(batch, n_items, dtype=torch.bool, device=device)

    def _filter_seen(self, scores):
        floor = torch.full_like(scores, -1e9)
        return torch.where(self.seen, floor, scores)

    def _retrieve(self):
        scores = self._filter_seen(self.model.scores(self.user))
        top_scores, top_idx = scores.topk(self.k, dim=-1)
        n_seen = self.seen.sum(-1)
        valid = (top_scores > -1e8).sum(-1)
        return top_scores, top_idx, n_seen, valid

    def build(self):
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(3):
                self._retrieve()
        torch.cuda.current_stream().wait_stream(s)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self.outputs = self._retrieve()

    def __call__(self, user, seen):
        self.user.copy_(user)
        self.seen.copy_(seen)
        self.graph.replay()
        return tuple(t.clone() for t in self.outputs)


def eager_retrieve(model, user, seen, k):
    scores = model.scores(user)
    scores = scores.masked_fill(seen, -1e9)
    top_scores, top_idx = scores.topk(k, dim=-1)
    return top_scores, top_idx, seen.sum(-1), (top_scores > -1e8).sum(-1)


def main():
    torch.manual_seed(0)
    dev = torch.device("cuda")
    model = TwoTower().to(dev).eval()
    requests = [(torch.randn(16, 24, device=dev), torch.rand(16, 128, device=dev) < 0.3) for _ in range(6)]
    with torch.no_grad():
        ref = [eager_retrieve(model, u, s, 5) for u, s in requests]
        try:
            retriever = Retriever(model, 16, 24, 128, device=dev)
            retriever.build()
            got = [retriever(u, s) for u, s in requests]
        except Exception as e:
            print(f"graph error: {type(e).__name__}: {str(e)[:300]}")
            print("VERDICT: FAILS")
            return
    ok = True
    for (rs, ri, rn, rv), (gs, gi, gn, gv) in zip(ref, got):
        ok = ok and torch.allclose(rs, gs, rtol=1e-4, atol=1e-5) and torch.equal(ri, gi)
        ok = ok and torch.equal(rn, gn) and torch.equal(rv, gv)
    print("VERDICT: OK" if ok else "VERDICT: DIVERGES")


if __name__ == "__main__":
    main()
