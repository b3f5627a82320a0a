from dataclasses import dataclass

import torch
import torch.nn as nn


@dataclass
class EvalConfig:
    in_dim: int = 40
    hidden: int = 96
    n_classes: int = 10
    batch: int = 32
    n_batches: int = 6


class MLPClassifier(nn.Module):
    def __init__(self, cfg: EvalConfig):
        super().__init__()
        self.layers = nn.Sequential(
            nn.Linear(cfg.in_dim, cfg.hidden), nn.LayerNorm(cfg.hidden), nn.GELU(),
            nn.Linear(cfg.hidden, cfg.hidden), nn.GELU(),
            nn.Linear(cfg.hidden, cfg.n_classes),
        )

    def forward(self, x):
        return self.layers(x)


class InferenceGraph:
    def __init__(self, model, example):
        self.model = model
        self.static_x = example.clone()
        self.graph = torch.cuda.CUDAGraph()
        self._warmup()
        with torch.cuda.graph(self.graph):
            self.static_logits = self.model(self.static_x)

    def _warmup(self, iters: int = 3):
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(iters):
                self.model(self.static_x)
        torch.cuda.current_stream().wait_stream(s)

    def run(self, x):
        self.static_x.copy_(x)
        self.graph.replay()


def evaluate_graphed(runner, batches):
    logits = []
    for x in batches:
        runner.run(x)
        logits.append(runner.static_logits)  # expect: CG955
    return logits


def evaluate_eager(model, batches):
    return [model(x) for x in batches]


def accuracy(logits, labels):
    preds = torch.cat([l.argmax(dim=-1) for l in logits])
    return (preds == torch.cat(labels)).float().mean()


@torch.no_grad()
def main():
    torch.manual_seed(0)
    torch.backends.cuda.matmul.allow_tf32 = False
    cfg, device = EvalConfig(), torch.device("cuda")
    model = MLPClassifier(cfg).to(device).eval()
    batches = [torch.randn(cfg.batch, cfg.in_dim, device=device) for _ in range(cfg.n_batches)]
    labels = [torch.randint(0, cfg.n_classes, (cfg.batch,), device=device) for _ in range(cfg.n_batches)]

    runner = InferenceGraph(model, batches[0])
    graphed = evaluate_graphed(runner, batches)
    eager = evaluate_eager(model, batches)
    print(f"acc graphed={accuracy(graphed, labels):.3f} eager={accuracy(eager, labels):.3f}")

    same = all(torch.allclose(a, b, atol=1e-4, rtol=1e-4) for a, b in zip(graphed, eager))
    return "OK" if same else "DIVERGES"


if __name__ == "__main__":
    try:
        verdict = main()
    except Exception as exc:
        print(f"{type(exc).__name__}: {exc}", flush=True)
        verdict = "FAILS"
    print(f"VERDICT: {verdict}", flush=True)
