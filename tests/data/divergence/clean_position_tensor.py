import math

import torch
import torch.nn as nn


class StaticKVCache:
    def __init__(self, batch, max_len, dim, device):
        self.k = torch.zeros(batch, max_len, dim, device=device)
        self.v = torch.zeros(batch, max_len, dim, device=device)
        self.cache_position = torch.zeros(1, dtype=torch.long, device=device)
        self.seen_tokens = 0
        self.max_len = max_len

    def advance(self):
        self.seen_tokens += 1
        self.cache_position.fill_(self.seen_tokens)


class DecoderLayer(nn.Module):
    def __init__(self, dim, max_len):
        super().__init__()
        self.dim = dim
        self.wq = nn.Linear(dim, dim, bias=False)
        self.wk = nn.Linear(dim, dim, bias=False)
        self.wv = nn.Linear(dim, dim, bias=False)
        self.wo = nn.Linear(dim, dim, bias=False)
        self.pos_emb = nn.Embedding(max_len, dim)
        self.register_buffer("slots", torch.arange(max_len), persistent=False)

    def forward(self, x, cache):
        pos = cache.cache_position
        h = x + self.pos_emb(pos)
        q, k, v = self.wq(h), self.wk(h), self.wv(h)
        cache.k.index_copy_(1, pos, k.unsqueeze(1))
        cache.v.index_copy_(1, pos, v.unsqueeze(1))
        scores = torch.einsum("bd,btd->bt", q, cache.k) / math.sqrt(self.dim)
        scores = scores.masked_fill(self.slots > pos, float("-inf"))
        ctx = torch.einsum("bt,btd->bd", scores.softmax(dim=-1), cache.v)
        return self.wo(ctx)


def capture(layer, cache, static_x):
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            layer(static_x, cache)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out = layer(static_x, cache)
    return g, out


@torch.inference_mode()
def main():
    torch.manual_seed(0)
    device = torch.device("cuda")
    batch, dim, max_len, new_tokens = 2, 64, 32, 12
    layer = DecoderLayer(dim, max_len).to(device).eval()

    cache = StaticKVCache(batch, max_len, dim, device)
    ref_cache = StaticKVCache(batch, max_len, dim, device)
    static_x = torch.zeros(batch, dim, device=device)
    graph, static_out = capture(layer, cache, static_x)

    x = torch.randn(batch, dim, device=device)
    first_mismatch = None
    for i in range(new_tokens):
        static_x.copy_(x)
        graph.replay()
        ref = layer(x, ref_cache)
        if first_mismatch is None and not torch.allclose(static_out, ref, rtol=1e-4, atol=1e-5):
            first_mismatch = i
        cache.advance()
        ref_cache.advance()
        x = torch.tanh(ref)

    torch.cuda.synchronize()
    print("VERDICT MATCHES" if first_mismatch is None else "VERDICT DIVERGES")


if __name__ == "__main__":
    main()
