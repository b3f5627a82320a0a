"""Masked-LM pretraining step; the loss only scores masked positions. fwd+bwd captured in a CUDA graph."""
import copy
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

IGNORE = -100


@dataclass
class MLMConfig:
    vocab: int = 500
    d_model: int = 64
    seq: int = 32
    batch: int = 8
    mask_prob: float = 0.15
    steps: int = 5


class TinyEncoder(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.emb = nn.Embedding(cfg.vocab, cfg.d_model)
        self.layer = nn.Sequential(nn.LayerNorm(cfg.d_model), nn.Linear(cfg.d_model, 128), nn.GELU(),
                                   nn.Linear(128, cfg.d_model))
        self.lm_head = MLMHead(cfg)

    def forward(self, tokens, labels):
        h = self.emb(tokens)
        return self.lm_head.loss(h + self.layer(h), labels)


class MLMHead(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.proj = nn.Linear(cfg.d_model, cfg.vocab)

    def loss(self, hidden, labels):
        selected = labels != IGNORE
        logits = self.proj(hidden[selected])  # expect: CG106
        return F.cross_entropy(logits, labels[selected])  # expect: CG106


def mlm_batches(cfg, n):
    g = torch.Generator(device="cuda").manual_seed(9)
    out = []
    for _ in range(n):
        tokens = torch.randint(0, cfg.vocab, (cfg.batch, cfg.seq), device="cuda", generator=g)
        pick = torch.rand(cfg.batch, cfg.seq, device="cuda", generator=g) < cfg.mask_prob
        pick[:, 0] = True
        labels = torch.where(pick, tokens, torch.full_like(tokens, IGNORE))
        out.append((torch.where(pick, torch.zeros_like(tokens), tokens), labels))
    return out


def main():
    torch.manual_seed(0)
    torch.backends.cuda.matmul.allow_tf32 = False
    cfg = MLMConfig()
    base = TinyEncoder(cfg).cuda()
    batches = mlm_batches(cfg, cfg.steps)

    model = copy.deepcopy(base)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    eager = []
    for tokens, labels in batches:
        opt.zero_grad(set_to_none=True)
        loss = model(tokens, labels)
        loss.backward()
        opt.step()
        eager.append(loss.detach().clone())

    try:
        model = copy.deepcopy(base)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        static_tokens, static_labels = (t.clone() for t in batches[0])
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(3):
                opt.zero_grad(set_to_none=True)
                model(static_tokens, static_labels).backward()
        torch.cuda.current_stream().wait_stream(s)
        opt.zero_grad(set_to_none=True)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            static_loss = model(static_tokens, static_labels)
            static_loss.backward()
        graphed = []
        for tokens, labels in batches:
            static_tokens.copy_(tokens); static_labels.copy_(labels)
            graph.replay()
            opt.step()
            graphed.append(static_loss.clone())
        torch.cuda.synchronize()
    except Exception as exc:
        print("graphed run raised:", type(exc).__name__, (str(exc).splitlines() or [""])[0])
        print("VERDICT: FAILS")
        return
    diverged = False
    for i, (a, b) in enumerate(zip(eager, graphed)):
        ok = torch.allclose(a, b, rtol=1e-4, atol=1e-5)
        print(f"step {i}: eager {a.item():.5f} graphed {b.item():.5f} match={ok}")
        diverged |= not ok
    print("VERDICT: DIVERGES" if diverged else "VERDICT: OK")


if __name__ == "__main__":
    main()
