import copy
from dataclasses import dataclass

import torch
import torch.nn as nn


@dataclass
class StreamConfig:
    vocab: int = 64
    dim: int = 48
    max_len: int = 64
    batch: int = 4
    steps: int = 10


class StreamingDecoder(nn.Module):
    def __init__(self, cfg: StreamConfig):
        super().__init__()
        self.tok = nn.Embedding(cfg.vocab, cfg.dim)
        self.pos = nn.Embedding(cfg.max_len, cfg.dim)
        self.mix = nn.Linear(2 * cfg.dim, cfg.dim)
        self.head = nn.Linear(cfg.dim, cfg.vocab)
        self.register_buffer("step", torch.zeros(1, dtype=torch.long))
        self.register_buffer("state", torch.zeros(cfg.batch, cfg.dim))

    def reset(self):
        self.step.zero_()
        self.state.zero_()

    def _embed(self, tok):
        return self.tok(tok) + self.pos(self.step).expand(tok.shape[0], -1)

    def forward(self, tok):
        h = torch.tanh(self.mix(torch.cat([self._embed(tok), self.state], dim=-1)))
        self.state.copy_(h)
        self.step.add_(1)
        return self.head(h)


class StreamingRunner:
    def __init__(self, decoder: StreamingDecoder, cfg: StreamConfig, device):
        self.decoder = decoder
        self.static_tok = torch.zeros(cfg.batch, dtype=torch.long, device=device)
        self.graph = torch.cuda.CUDAGraph()

    def prepare(self):
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(3):
                self.decoder(self.static_tok)
        torch.cuda.current_stream().wait_stream(s)
        with torch.cuda.graph(self.graph):
            self.static_logits = self.decoder(self.static_tok)
        self.decoder.reset()

    def feed(self, tok):
        self.static_tok.copy_(tok)
        self.graph.replay()
        return self.static_logits.clone()


@torch.no_grad()
def main():
    torch.manual_seed(0)
    torch.backends.cuda.matmul.allow_tf32 = False
    cfg, device = StreamConfig(), torch.device("cuda")
    decoder = StreamingDecoder(cfg).to(device).eval()
    ref_decoder = copy.deepcopy(decoder)
    tokens = torch.randint(0, cfg.vocab, (cfg.steps, cfg.batch), device=device)

    runner = StreamingRunner(decoder, cfg, device)
    runner.prepare()
    streamed = [runner.feed(tokens[i]) for i in range(cfg.steps)]

    ref_decoder.reset()
    reference = [ref_decoder(tokens[i]) for i in range(cfg.steps)]

    same = all(torch.allclose(a, b, atol=1e-4, rtol=1e-4) for a, b in zip(streamed, reference))
    same = same and int(decoder.step.item()) == cfg.steps
    return "OK" if same else "DIVERGES"


if __name__ == "__main__":
    try:
        verdict = main()
    except Exception as exc:
        print(f"{type(exc).__name__}: {exc}", flush=True)
        verdict = "FAILS"
    print(f"VERDICT: {verdict}", flush=True)
