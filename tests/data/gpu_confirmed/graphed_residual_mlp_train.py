import copy
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class BlockConfig:
    dim: int = 48
    hidden: int = 96
    depth: int = 3
    use_residual: bool = True
    res_scale: float = 0.5
    batch: int = 32
    lr: float = 0.05
    steps: int = 6


class ResidualMLP(nn.Module):
    def __init__(self, cfg: BlockConfig):
        super().__init__()
        self.use_residual = cfg.use_residual
        self.res_scale = cfg.res_scale
        self.blocks = nn.ModuleList(
            nn.Sequential(nn.LayerNorm(cfg.dim), nn.Linear(cfg.dim, cfg.hidden), nn.GELU(),
                          nn.Linear(cfg.hidden, cfg.dim))
            for _ in range(cfg.depth))
        self.head = nn.Linear(cfg.dim, 1)

    def forward(self, x):
        for block in self.blocks:
            if self.use_residual:
                x = x + self.res_scale * block(x)
            else:
                x = block(x)
        return self.head(x).squeeze(-1)


def side_stream_warmup(model, sample_x, iters: int = 3):
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(iters):
            model(sample_x).sum().backward()
    torch.cuda.current_stream().wait_stream(s)
    model.zero_grad(set_to_none=True)


def train(model, batches, cfg: BlockConfig):
    opt = torch.optim.SGD(model.parameters(), lr=cfg.lr, momentum=0.9)
    losses = []
    for x, y in batches:
        opt.zero_grad(set_to_none=True)
        loss = F.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.detach().clone())
    return losses


def main():
    torch.manual_seed(0)
    torch.backends.cuda.matmul.allow_tf32 = False
    cfg, device = BlockConfig(), torch.device("cuda")
    model = ResidualMLP(cfg).to(device)
    ref_model = copy.deepcopy(model)
    batches = [(torch.randn(cfg.batch, cfg.dim, device=device),
                torch.randn(cfg.batch, device=device)) for _ in range(cfg.steps)]

    sample_x = torch.randn(cfg.batch, cfg.dim, device=device)
    side_stream_warmup(model, sample_x)
    graphed = torch.cuda.make_graphed_callables(model, (sample_x,))
    graph_losses = train(graphed, batches, cfg)
    ref_losses = train(ref_model, batches, cfg)

    close = lambda a, b: torch.allclose(a, b, atol=1e-4, rtol=1e-4)
    same = all(close(a, b) for a, b in zip(graph_losses, ref_losses))
    same = same and all(close(p, q) for p, q in zip(model.parameters(), ref_model.parameters()))
    return "OK" if same else "DIVERGES"


if __name__ == "__main__":
    try:
        verdict = main()
    except Exception as exc:
        print(f"{type(exc).__name__}: {exc}", flush=True)
        verdict = "FAILS"
    print(f"VERDICT: {verdict}", flush=True)
