from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class GenerationConfig:
    temperature: float = 1.0
    top_k: int = 40
    max_new_tokens: int = 6


class TinyDecoder(nn.Module):
    def __init__(self, vocab_size=384, dim=64):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, dim)
        self.mix = nn.Linear(dim, dim)
        self.norm = nn.LayerNorm(dim)
        self.lm_head = nn.Linear(dim, vocab_size, bias=False)

    def forward(self, tokens):
        h = self.embed(tokens)
        h = h + torch.tanh(self.mix(h))
        return self.lm_head(self.norm(h))


class LogitsProcessor(nn.Module):
    def __init__(self, gen_cfg):
        super().__init__()
        self.top_k = gen_cfg.top_k
        self.register_buffer("temperature", torch.full((1,), gen_cfg.temperature))

    def sync(self, gen_cfg):
        self.temperature.fill_(gen_cfg.temperature)

    def forward(self, logits):
        scaled = logits / self.temperature
        vals, idx = scaled.topk(self.top_k, dim=-1)
        return F.softmax(vals, dim=-1), idx


class DecodeRunner:
    def __init__(self, model, processor, batch):
        self.model = model
        self.processor = processor
        self.input_ids = torch.zeros(batch, dtype=torch.long, device="cuda")

    def forward(self, ids):
        return self.processor(self.model(ids))

    @torch.inference_mode()
    def capture(self):
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(3):
                self.forward(self.input_ids)
        torch.cuda.current_stream().wait_stream(s)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self.probs, self.idx = self.forward(self.input_ids)

    @torch.inference_mode()
    def __call__(self, ids):
        self.input_ids.copy_(ids)
        self.graph.replay()
        return self.probs.clone(), self.idx.clone()


def main():
    torch.manual_seed(0)
    gen_cfg = GenerationConfig()
    model = TinyDecoder().cuda().eval()
    processor = LogitsProcessor(gen_cfg).cuda()
    runner = DecodeRunner(model, processor, batch=8)
    runner.capture()

    ids = torch.randint(0, 384, (8,), device="cuda")
    checks = []
    for temperature in (1.0, 0.7, 0.3, 0.3, 2.0, 0.9):
        gen_cfg.temperature = temperature
        processor.sync(gen_cfg)
        probs, idx = runner(ids)
        with torch.inference_mode():
            ref_probs, ref_idx = runner.forward(ids)
        checks.append(torch.equal(idx, ref_idx) and torch.allclose(probs, ref_probs, rtol=1e-4, atol=1e-5))
        ids = idx.gather(-1, probs.argmax(-1, keepdim=True)).squeeze(-1)

    torch.cuda.synchronize()
    print("VERDICT MATCHES" if all(checks) else "VERDICT DIVERGES")


if __name__ == "__main__":
    main()
