"""Semantic-segmentation training with a step LR schedule; the whole training iteration is one CUDA graph."""
import copy
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class TrainConfig:
    classes: int = 4
    size: int = 32
    batch: int = 8
    lr: float = 0.1
    momentum: float = 0.9
    lr_step: int = 2
    lr_gamma: float = 0.3
    warmup_iters: int = 3
    iters: int = 6


def conv_block(c_in, c_out):
    return nn.Sequential(nn.Conv2d(c_in, c_out, 3, padding=1), nn.GroupNorm(4, c_out), nn.ReLU())


class TinySegNet(nn.Module):
    def __init__(self, classes):
        super().__init__()
        self.enc = conv_block(3, 16)
        self.down = conv_block(16, 32)
        self.dec = conv_block(48, 16)
        self.head = nn.Conv2d(16, classes, 1)

    def forward(self, x):
        e = self.enc(x)
        d = self.down(F.avg_pool2d(e, 2))
        d = F.interpolate(d, scale_factor=2.0, mode="nearest")
        return self.head(self.dec(torch.cat([e, d], dim=1)))


def build_optim(model, cfg: TrainConfig):
    opt = torch.optim.SGD(model.parameters(), lr=cfg.lr, momentum=cfg.momentum)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=cfg.lr_step, gamma=cfg.lr_gamma)
    return opt, sched


class GraphedIteration:
    def __init__(self, model, opt, images, masks, warmup_iters):
        self.model, self.opt = model, opt
        self.images, self.masks = images.clone(), masks.clone()
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(warmup_iters):
                self.opt.zero_grad(set_to_none=True)
                self._iteration()
        torch.cuda.current_stream().wait_stream(s)
        self.graph = torch.cuda.CUDAGraph()
        self.opt.zero_grad(set_to_none=True)
        with torch.cuda.graph(self.graph):
            self.static_loss = self._iteration()

    def _iteration(self):
        loss = F.cross_entropy(self.model(self.images), self.masks)
        loss.backward()
        self.opt.step()
        return loss.detach()

    def __call__(self, images, masks):
        self.images.copy_(images)
        self.masks.copy_(masks)
        self.graph.replay()
        return self.static_loss.clone()


def eager_iteration(model, opt, images, masks):
    opt.zero_grad(set_to_none=True)
    loss = F.cross_entropy(model(images), masks)
    loss.backward()
    opt.step()
    return loss.detach()


def synthetic_batches(cfg, device, n):
    gen = torch.Generator().manual_seed(2)
    out = []
    for _ in range(n):
        images = torch.rand(cfg.batch, 3, cfg.size, cfg.size, generator=gen)
        masks = (images.mean(1) * cfg.classes).long().clamp(max=cfg.classes - 1)
        out.append((images.to(device), masks.to(device)))
    return out


def main():
    torch.manual_seed(0)
    device = torch.device("cuda")
    cfg = TrainConfig()
    batches = synthetic_batches(cfg, device, cfg.iters)
    graph_model = TinySegNet(cfg.classes).to(device)
    eager_model = copy.deepcopy(graph_model)

    opt, sched = build_optim(eager_model, cfg)
    for _ in range(cfg.warmup_iters):
        eager_iteration(eager_model, opt, *batches[0])
    ref_losses = []
    for images, masks in batches:
        ref_losses.append(eager_iteration(eager_model, opt, images, masks))
        sched.step()

    try:
        opt_g, sched_g = build_optim(graph_model, cfg)
        step = GraphedIteration(graph_model, opt_g, *batches[0], warmup_iters=cfg.warmup_iters)
        losses = []
        for images, masks in batches:
            losses.append(step(images, masks))
            sched_g.step()  # expect: CG602
        torch.cuda.synchronize()
    except Exception as exc:  # noqa: BLE001
        print(f"graph path raised {type(exc).__name__}: {exc}")
        print("VERDICT: FAILS")
        return

    print("lr now:", opt_g.param_groups[0]["lr"], "| losses graph:", [round(v.item(), 5) for v in losses])
    print("                      losses eager:", [round(v.item(), 5) for v in ref_losses])
    ok = all(torch.allclose(p, q, rtol=1e-3, atol=1e-4)
             for p, q in zip(graph_model.parameters(), eager_model.parameters()))
    print("VERDICT: OK" if ok else "VERDICT: DIVERGES")


if __name__ == "__main__":
    main()
