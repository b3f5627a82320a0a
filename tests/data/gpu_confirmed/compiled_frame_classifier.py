from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class StreamConfig:
    feat: int = 40
    hidden: int = 128
    n_labels: int = 12
    frames: int = 16
    batch: int = 4
    chunks: int = 6


class FrameClassifier(nn.Module):
    def __init__(self, cfg: StreamConfig):
        super().__init__()
        self.norm = nn.LayerNorm(cfg.feat)
        self.fc1 = nn.Linear(cfg.feat, cfg.hidden)
        self.fc2 = nn.Linear(cfg.hidden, cfg.n_labels)

    def forward(self, frames):
        return F.log_softmax(self.fc2(F.gelu(self.fc1(self.norm(frames)))), dim=-1)


class ChunkedStream:
    def __init__(self, model, use_compile: bool):
        self.fn = torch.compile(model, mode="reduce-overhead") if use_compile else model
        self.chunk_logp = []

    def warmup(self, example, iters: int = 3):
        for _ in range(iters):
            self.fn(example)
        torch.cuda.synchronize()

    def push(self, chunk):
        logp = self.fn(chunk)
        self.chunk_logp.append(logp)  # expect: CG956

    def utterance_scores(self):
        return torch.stack(self.chunk_logp).logsumexp(dim=2)


def make_chunks(cfg: StreamConfig, device):
    return [torch.randn(cfg.batch, cfg.frames, cfg.feat, device=device) for _ in range(cfg.chunks)]


@torch.no_grad()
def main():
    torch.manual_seed(0)
    torch.backends.cuda.matmul.allow_tf32 = False
    cfg, device = StreamConfig(), torch.device("cuda")
    model = FrameClassifier(cfg).to(device).eval()
    chunks = make_chunks(cfg, device)

    stream = ChunkedStream(model, use_compile=True)
    stream.warmup(chunks[0])
    for c in chunks:
        stream.push(c)
    compiled_logp = torch.stack(stream.chunk_logp)

    ref = ChunkedStream(model, use_compile=False)
    for c in chunks:
        ref.push(c)
    eager_logp = torch.stack(ref.chunk_logp)

    same = torch.allclose(compiled_logp, eager_logp, atol=1e-4, rtol=1e-4)
    return "OK" if same else "DIVERGES"


if __name__ == "__main__":
    try:
        verdict = main()
    except Exception as exc:
        print(f"{type(exc).__name__}: {exc}", flush=True)
        verdict = "FAILS"
    print(f"VERDICT: {verdict}", flush=True)
