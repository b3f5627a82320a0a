from dataclasses import dataclass

import torch
import torch.nn as nn


@dataclass
class MemoryConfig:
    dim: int = 48
    capacity: int = 32
    batch: int = 4
    warm_entries: int = 2
    steps: int = 8


class EpisodicMemory:
    def __init__(self, cfg: MemoryConfig, device):
        self.bank = torch.zeros(cfg.capacity, cfg.batch, cfg.dim, device=device)
        self.entries = []

    def push(self, feats, tag):
        self.bank[len(self.entries)].copy_(feats)
        self.entries.append(tag)

    def summary(self):
        n = len(self.entries)
        return self.bank[:n].mean(dim=0)  # expect: CG702


class ReadoutHead(nn.Module):
    def __init__(self, cfg: MemoryConfig):
        super().__init__()
        self.query = nn.Linear(cfg.dim, cfg.dim)
        self.fuse = nn.Sequential(nn.Linear(2 * cfg.dim, cfg.dim), nn.GELU(), nn.Linear(cfg.dim, cfg.dim))

    def forward(self, q, context):
        return self.fuse(torch.cat([torch.tanh(self.query(q)), context], dim=-1))


class ReadoutGraph:
    def __init__(self, head, memory, cfg: MemoryConfig, device):
        self.head, self.memory = head, memory
        self.static_q = torch.zeros(cfg.batch, cfg.dim, device=device)
        self.graph = torch.cuda.CUDAGraph()

    def _readout(self):
        return self.head(self.static_q, self.memory.summary())

    def capture(self):
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(3):
                self._readout()
        torch.cuda.current_stream().wait_stream(s)
        with torch.cuda.graph(self.graph):
            self.static_out = self._readout()

    def __call__(self, q):
        self.static_q.copy_(q)
        self.graph.replay()
        return self.static_out.clone()


def run_episode(memory, readout, feats, queries, cfg):
    for i in range(cfg.warm_entries):
        memory.push(feats[i], tag=f"obs{i}")
    if hasattr(readout, "capture"):
        readout.capture()
    outs = []
    for i in range(cfg.warm_entries, cfg.warm_entries + cfg.steps):
        memory.push(feats[i], tag=f"obs{i}")
        outs.append(readout(queries[i]))
    return outs


@torch.no_grad()
def main():
    torch.manual_seed(0)
    torch.backends.cuda.matmul.allow_tf32 = False
    cfg, device = MemoryConfig(), torch.device("cuda")
    head = ReadoutHead(cfg).to(device).eval()
    total = cfg.warm_entries + cfg.steps
    feats = torch.randn(total, cfg.batch, cfg.dim, device=device)
    queries = torch.randn(total, cfg.batch, cfg.dim, device=device)

    memory = EpisodicMemory(cfg, device)
    replayed = run_episode(memory, ReadoutGraph(head, memory, cfg, device), feats, queries, cfg)

    ref_memory = EpisodicMemory(cfg, device)
    eager = lambda q: head(q, ref_memory.summary())
    reference = run_episode(ref_memory, eager, feats, queries, cfg)

    same = all(torch.allclose(a, b, atol=1e-4, rtol=1e-4) for a, b in zip(replayed, reference))
    return "OK" if same else "DIVERGES"


if __name__ == "__main__":
    try:
        verdict = main()
    except Exception as exc:
        print(f"{type(exc).__name__}: {exc}", flush=True)
        verdict = "FAILS"
    print(f"VERDICT: {verdict}", flush=True)
