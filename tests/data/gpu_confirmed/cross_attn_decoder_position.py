import math
from dataclasses import dataclass

import torch
import torch.nn as nn


@dataclass
class DecoderConfig:
    vocab: int = 80
    dim: int = 64
    max_len: int = 32
    mem_len: int = 12
    batch: int = 3
    steps: int = 8


class CrossAttnDecoderStep(nn.Module):
    def __init__(self, cfg: DecoderConfig):
        super().__init__()
        self.tok = nn.Embedding(cfg.vocab, cfg.dim)
        self.pos_table = nn.Parameter(torch.randn(cfg.max_len, cfg.dim) * 0.5)
        self.q = nn.Linear(cfg.dim, cfg.dim)
        self.kv = nn.Linear(cfg.dim, 2 * cfg.dim)
        self.out = nn.Linear(cfg.dim, cfg.vocab)
        self.scale = 1.0 / math.sqrt(cfg.dim)
        self.position = 0

    def reset(self):
        self.position = 0

    def advance(self):
        self.position += 1

    def _query(self, tok):
        return self.q(self.tok(tok) + self.pos_table[self.position])  # expect: CG601

    def forward(self, tok, memory):
        q = self._query(tok)
        k, v = self.kv(memory).chunk(2, dim=-1)
        att = torch.softmax(torch.einsum("bd,bmd->bm", q, k) * self.scale, dim=-1)
        ctx = torch.einsum("bm,bmd->bd", att, v)
        return self.out(ctx + q)


class DecoderGraph:
    def __init__(self, step_module, memory, cfg: DecoderConfig, device):
        self.step_module = step_module
        self.static_tok = torch.zeros(cfg.batch, dtype=torch.long, device=device)
        self.static_mem = memory.clone()
        self.graph = torch.cuda.CUDAGraph()

    def capture(self):
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(3):
                self.step_module(self.static_tok, self.static_mem)
        torch.cuda.current_stream().wait_stream(s)
        with torch.cuda.graph(self.graph):
            self.static_logits = self.step_module(self.static_tok, self.static_mem)

    def __call__(self, tok, memory):
        self.static_tok.copy_(tok)
        self.static_mem.copy_(memory)
        self.graph.replay()
        return self.static_logits.clone()


def decode(step_fn, module, tokens, memory):
    module.reset()
    logits = []
    for tok in tokens:
        logits.append(step_fn(tok, memory))
        module.advance()
    return logits


@torch.no_grad()
def main():
    torch.manual_seed(0)
    torch.backends.cuda.matmul.allow_tf32 = False
    cfg, device = DecoderConfig(), torch.device("cuda")
    module = CrossAttnDecoderStep(cfg).to(device).eval()
    memory = torch.randn(cfg.batch, cfg.mem_len, cfg.dim, device=device)
    tokens = torch.randint(0, cfg.vocab, (cfg.steps, cfg.batch), device=device)

    runner = DecoderGraph(module, memory, cfg, device)
    runner.capture()
    replayed = decode(runner, module, tokens, memory)
    reference = decode(module, module, tokens, memory)

    same = all(torch.allclose(a, b, atol=1e-4, rtol=1e-4) for a, b in zip(replayed, reference))
    return "OK" if same else "DIVERGES"


if __name__ == "__main__":
    try:
        verdict = main()
    except Exception as exc:
        print(f"{type(exc).__name__}: {exc}", flush=True)
        verdict = "FAILS"
    print(f"VERDICT: {verdict}", flush=True)
