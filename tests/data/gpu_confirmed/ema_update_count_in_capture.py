"""Train loop with a graph-captured EMA update (ModelEMA style from timm / ultralytics)."""
import copy
import functools
import math

import torch
import torch.nn as nn


class ConvBnAct(nn.Sequential):
    def __init__(self, cin, cout, stride=1):
        super().__init__(nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout), nn.SiLU())


class TinyNet(nn.Module):
    def __init__(self, widths=(16, 32, 64), num_classes=10):
        super().__init__()
        chans = (3,) + tuple(widths)
        self.stages = nn.ModuleList(ConvBnAct(a, b, stride=2) for a, b in zip(chans[:-1], chans[1:]))
        self.head = nn.Linear(widths[-1], num_classes)

    def forward(self, x):
        for stage in self.stages:
            x = stage(x)
        return self.head(x.mean(dim=(2, 3)))


def _ramp_decay(updates, decay, tau):
    return decay * (1 - math.exp(-updates / tau))


class ModelEMA:
    def __init__(self, model, decay=0.9999, tau=20, updates=0):
        self.ema = copy.deepcopy(model).eval()
        self.updates = updates
        self.decay = functools.partial(_ramp_decay, decay=decay, tau=tau)
        for p in self.ema.parameters():
            p.requires_grad_(False)

    @torch.no_grad()
    def update(self, model):
        self.updates += 1  # expect: CG505
        d = self.decay(self.updates)
        msd = model.state_dict()
        for k, v in self.ema.state_dict().items():
            if v.dtype.is_floating_point:
                v.mul_(d).add_(msd[k].detach(), alpha=1.0 - d)


class GraphedEMAUpdate:
    """Captures ModelEMA.update with the raw capture_begin/capture_end API."""

    def __init__(self, ema, model, num_warmup=2):
        self.ema, self.model, self.num_warmup = ema, model, num_warmup
        self.graph = torch.cuda.CUDAGraph()

    def capture(self):
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for _ in range(self.num_warmup):
                self.ema.update(self.model)
            self.graph.capture_begin()
            try:
                self.ema.update(self.model)
            finally:
                self.graph.capture_end()
        torch.cuda.current_stream().wait_stream(stream)

    def __call__(self):
        self.graph.replay()


def main():
    torch.manual_seed(0)
    device = "cuda"
    model = TinyNet().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.2, momentum=0.9)
    ema = ModelEMA(model)
    graphed_update = GraphedEMAUpdate(ema, model)
    try:
        graphed_update.capture()
    except Exception as e:
        print(f"capture failed: {type(e).__name__}: {str(e)[:200]}")
        print("VERDICT HAZARD")
        return
    ref_ema = copy.deepcopy(ema)
    for step in range(6):
        images = torch.randn(32, 3, 32, 32, device=device)
        labels = torch.randint(0, 10, (32,), device=device)
        loss = nn.functional.cross_entropy(model(images), labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        graphed_update()
        ref_ema.update(model)
    max_err = max((a - b).abs().max().item() for a, b in
                  zip(ema.ema.state_dict().values(), ref_ema.ema.state_dict().values()) if a.is_floating_point())
    print(f"ema updates: graph={ema.updates} eager={ref_ema.updates}; max |graph - eager| = {max_err:.3e}")
    ok = max_err <= 1e-6 and ema.updates == ref_ema.updates
    print("VERDICT OK" if ok else "VERDICT HAZARD")


if __name__ == "__main__":
    main()
