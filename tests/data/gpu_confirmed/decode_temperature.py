from dataclasses import dataclass

import torch
import torch.nn as nn


@dataclass
class DecodeConfig:
    vocab: int = 96
    hidden: int = 64
    batch: int = 4
    steps: int = 8
    t_start: float = 1.0
    t_end: float = 2.5


class TinyGRULM(nn.Module):
    def __init__(self, cfg: DecodeConfig):
        super().__init__()
        self.embed = nn.Embedding(cfg.vocab, cfg.hidden)
        self.cell = nn.GRUCell(cfg.hidden, cfg.hidden)
        self.proj = nn.Linear(cfg.hidden, cfg.vocab)

    def forward(self, tok, h):
        h = self.cell(self.embed(tok), h)
        return self.proj(h), h


class TemperatureSampler:
    def __init__(self, temperature: float = 1.0):
        self.temperature = temperature

    def log_probs(self, logits):
        return torch.log_softmax(logits / self.temperature, dim=-1)  # expect: CG601


class DecodeGraph:
    def __init__(self, model, sampler, cfg, device):
        self.model = model
        self.sampler = sampler
        self.static_tok = torch.zeros(cfg.batch, dtype=torch.long, device=device)
        self.static_h = torch.zeros(cfg.batch, cfg.hidden, device=device)
        self.graph = torch.cuda.CUDAGraph()

    def _step(self):
        logits, h = self.model(self.static_tok, self.static_h)
        return self.sampler.log_probs(logits), h

    def capture(self, warmup_iters: int = 3):
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(warmup_iters):
                self._step()
        torch.cuda.current_stream().wait_stream(s)
        with torch.cuda.graph(self.graph):
            self.static_logp, self.static_h_next = self._step()

    def step(self, tok, h):
        self.static_tok.copy_(tok)
        self.static_h.copy_(h)
        self.graph.replay()
        return self.static_logp.clone(), self.static_h_next.clone()


def temperature_at(cfg: DecodeConfig, i: int) -> float:
    frac = i / max(cfg.steps - 1, 1)
    return cfg.t_start + (cfg.t_end - cfg.t_start) * frac


@torch.no_grad()
def main():
    torch.manual_seed(0)
    torch.backends.cuda.matmul.allow_tf32 = False
    cfg = DecodeConfig()
    device = torch.device("cuda")
    model = TinyGRULM(cfg).to(device).eval()
    tokens = torch.randint(0, cfg.vocab, (cfg.steps, cfg.batch), device=device)
    h0 = torch.zeros(cfg.batch, cfg.hidden, device=device)

    sampler = TemperatureSampler(cfg.t_start)
    runner = DecodeGraph(model, sampler, cfg, device)
    runner.capture()
    replayed, h = [], h0
    for i in range(cfg.steps):
        sampler.temperature = temperature_at(cfg, i)
        logp, h = runner.step(tokens[i], h)
        replayed.append(logp)

    ref_sampler = TemperatureSampler(cfg.t_start)
    reference, h = [], h0
    for i in range(cfg.steps):
        ref_sampler.temperature = temperature_at(cfg, i)
        logits, h = model(tokens[i], h)
        reference.append(ref_sampler.log_probs(logits))

    same = all(torch.allclose(a, b, atol=1e-4, rtol=1e-4) for a, b in zip(replayed, reference))
    return "OK" if same else "DIVERGES"


if __name__ == "__main__":
    try:
        verdict = main()
    except Exception as exc:
        print(f"{type(exc).__name__}: {exc}", flush=True)
        verdict = "FAILS"
    print(f"VERDICT: {verdict}", flush=True)
