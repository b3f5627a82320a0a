from dataclasses import dataclass

import torch
import torch.nn as nn


@dataclass
class MoEConfig:
    dim: int = 64
    experts: int = 4
    expansion: int = 2
    tokens: int = 64
    steps: int = 4


class Expert(nn.Module):
    def __init__(self, dim, expansion):
        super().__init__()
        self.up = nn.Linear(dim, dim * expansion)
        self.down = nn.Linear(dim * expansion, dim)

    def forward(self, x):
        return self.down(torch.relu(self.up(x)))


class Top1MoE(nn.Module):
    def __init__(self, cfg: MoEConfig):
        super().__init__()
        self.norm = nn.LayerNorm(cfg.dim)
        self.router = nn.Linear(cfg.dim, cfg.experts)
        self.experts = nn.ModuleList(Expert(cfg.dim, cfg.expansion) for _ in range(cfg.experts))

    def _route(self, x):
        gates = torch.softmax(self.router(x), dim=-1)
        return gates.max(dim=-1)

    def _dispatch(self, x, expert_idx, e):
        rows = torch.nonzero(expert_idx == e).squeeze(-1)  # expect: CG105
        return rows, x.index_select(0, rows)

    def forward(self, x):
        h = self.norm(x)
        weight, expert_idx = self._route(h)
        out = torch.zeros_like(h)
        for e, expert in enumerate(self.experts):
            rows, tokens = self._dispatch(h, expert_idx, e)
            scaled = expert(tokens) * weight.index_select(0, rows).unsqueeze(-1)
            out.index_copy_(0, rows, scaled)
        return x + out


class MoEGraphRunner:
    def __init__(self, block, example):
        self.block = block
        self.static_in = example.clone()
        self.graph = torch.cuda.CUDAGraph()
        self._warmup()
        with torch.cuda.graph(self.graph):
            self.static_out = self.block(self.static_in)

    def _warmup(self, iters: int = 3):
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(iters):
                self.block(self.static_in)
        torch.cuda.current_stream().wait_stream(s)

    def __call__(self, x):
        self.static_in.copy_(x)
        self.graph.replay()
        return self.static_out.clone()


@torch.no_grad()
def main():
    torch.manual_seed(0)
    torch.backends.cuda.matmul.allow_tf32 = False
    cfg, device = MoEConfig(), torch.device("cuda")
    block = Top1MoE(cfg).to(device).eval()
    inputs = torch.randn(cfg.steps, cfg.tokens, cfg.dim, device=device)

    runner = MoEGraphRunner(block, inputs[0])
    replayed = [runner(x) for x in inputs]
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
