import math
from dataclasses import dataclass

import torch
import torch.nn as nn


@dataclass
class EncoderConfig:
    dim: int = 64
    heads: int = 4
    seq: int = 16
    batch: int = 4
    steps: int = 4
    debug: bool = True


class SelfAttentionBlock(nn.Module):
    def __init__(self, cfg: EncoderConfig):
        super().__init__()
        self.cfg = cfg
        self.ln1 = nn.LayerNorm(cfg.dim)
        self.ln2 = nn.LayerNorm(cfg.dim)
        self.qkv = nn.Linear(cfg.dim, 3 * cfg.dim)
        self.proj = nn.Linear(cfg.dim, cfg.dim)
        self.ff = nn.Sequential(nn.Linear(cfg.dim, 4 * cfg.dim), nn.GELU(), nn.Linear(4 * cfg.dim, cfg.dim))

    def _split(self, t):
        b, s, _ = t.shape
        return t.view(b, s, self.cfg.heads, -1).transpose(1, 2)

    def _attend(self, x):
        q, k, v = (self._split(t) for t in self.qkv(x).chunk(3, dim=-1))
        att = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), dim=-1)
        if self.cfg.debug:
            entropy = -(att * att.clamp_min(1e-9).log()).sum(-1).mean()
            print("attn entropy", entropy)  # expect: CG103
        out = (att @ v).transpose(1, 2).reshape(x.shape)
        return self.proj(out)

    def forward(self, x):
        x = x + self._attend(self.ln1(x))
        return x + self.ff(self.ln2(x))


class EncoderGraph:
    def __init__(self, block, cfg: EncoderConfig, device):
        self.block = block
        self.static_x = torch.zeros(cfg.batch, cfg.seq, cfg.dim, device=device)
        self.graph = torch.cuda.CUDAGraph()

    def capture(self):
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(3):
                self.block(self.static_x)
        torch.cuda.current_stream().wait_stream(s)
        with torch.cuda.graph(self.graph):
            self.static_y = self.block(self.static_x)

    def encode(self, x):
        self.static_x.copy_(x)
        self.graph.replay()
        return self.static_y.clone()


@torch.no_grad()
def main():
    torch.manual_seed(0)
    torch.backends.cuda.matmul.allow_tf32 = False
    cfg, device = EncoderConfig(), torch.device("cuda")
    block = SelfAttentionBlock(cfg).to(device).eval()
    inputs = torch.randn(cfg.steps, cfg.batch, cfg.seq, cfg.dim, device=device)

    runner = EncoderGraph(block, cfg, device)
    runner.capture()
    replayed = [runner.encode(x) for x in inputs]
    reference = [block(x) for x in inputs]

    same = all(torch.allclose(a, b, atol=1e-4, rtol=1e-4) for a, b in zip(replayed, reference))
    return "OK" if same else "DIVERGES"


if __name__ == "__main__":
    try:
        verdict = main()
    except Exception as exc:
        print(f"{type(exc).__name__}: {exc}", flush=True)
        verdict = "FAILS"
    print(f"VERDICT: {verdict}", flush=True)
