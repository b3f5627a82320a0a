"""Graphed single-token decode step; the write position lives on the device and advances in-graph."""
import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class DecodeConfig:
    vocab: int = 128
    d_model: int = 64
    n_heads: int = 4
    max_len: int = 20
    batch: int = 3


class DeviceKVCache:
    def __init__(self, cfg: DecodeConfig, device):
        hd = cfg.d_model // cfg.n_heads
        self.k = torch.zeros(cfg.batch, cfg.n_heads, cfg.max_len, hd, device=device)
        self.v = torch.zeros_like(self.k)
        self.pos = torch.zeros(1, dtype=torch.long, device=device)
        self.slots = torch.arange(cfg.max_len, device=device)

    def reset(self):
        self.k.zero_()
        self.v.zero_()
        self.pos.zero_()


class Decoder(nn.Module):
    def __init__(self, cfg: DecodeConfig):
        super().__init__()
        self.n_heads, self.hd = cfg.n_heads, cfg.d_model // cfg.n_heads
        self.scale = 1.0 / math.sqrt(self.hd)
        self.embed = nn.Embedding(cfg.vocab, cfg.d_model)
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model)
        self.head = nn.Linear(cfg.d_model, cfg.vocab)

    def step(self, tokens, cache: DeviceKVCache):
        h = self.embed(tokens)
        q, k, v = (t.view(h.shape[0], self.n_heads, self.hd) for t in self.qkv(h).chunk(3, -1))
        cache.k.index_copy_(2, cache.pos, k.unsqueeze(2))
        cache.v.index_copy_(2, cache.pos, v.unsqueeze(2))
        scores = torch.einsum("bhd,bhtd->bht", q, cache.k) * self.scale
        scores = scores.masked_fill((cache.slots > cache.pos).view(1, 1, -1), float("-inf"))
        ctx = torch.einsum("bht,bhtd->bhd", F.softmax(scores, -1), cache.v)
        cache.pos.add_(1)
        return self.head(h + ctx.reshape(h.shape))


class DecodeServer:
    def __init__(self, model, cfg: DecodeConfig, device):
        self.model, self.cfg = model, cfg
        self.cache = DeviceKVCache(cfg, device)
        self.static_tok = torch.zeros(cfg.batch, dtype=torch.long, device=device)
        self.generated = 0
        self.graph = torch.cuda.CUDAGraph()

    def capture(self):
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(3):
                self.model.step(self.static_tok, self.cache)
        torch.cuda.current_stream().wait_stream(s)
        self.cache.reset()
        with torch.cuda.graph(self.graph):
            self.static_logits = self.model.step(self.static_tok, self.cache)
        self.cache.reset()

    def generate(self, first, n_new):
        tok, out = first, []
        while self.generated < min(n_new, self.cfg.max_len):
            self.static_tok.copy_(tok)
            self.graph.replay()
            self.generated += 1
            tok = self.static_logits.argmax(-1)
            out.append(self.static_logits.clone())
        return torch.stack(out)


@torch.no_grad()
def main():
    torch.manual_seed(0)
    cfg, device = DecodeConfig(), "cuda"
    model = Decoder(cfg).to(device).eval()
    first = torch.randint(0, cfg.vocab, (cfg.batch,), device=device)
    cache, tok, ref = DeviceKVCache(cfg, device), first, []
    for _ in range(14):
        logits = model.step(tok, cache)
        ref.append(logits)
        tok = logits.argmax(-1)
    ref = torch.stack(ref)
    try:
        server = DecodeServer(model, cfg, device)
        server.capture()
        out = server.generate(first, 14)
        torch.cuda.synchronize()
    except Exception as exc:
        print(f"graph error: {type(exc).__name__}: {exc}")
        print("VERDICT: FAILS")
        return
    print(f"max |diff| = {(out - ref).abs().max().item():.3e}")
    print("VERDICT: OK" if torch.allclose(out, ref, rtol=1e-4, atol=1e-5) else "VERDICT: DIVERGES")


if __name__ == "__main__":
    main()
