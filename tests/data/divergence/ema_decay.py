import torch


def ema_update(target, source, decay):
    for t, s in zip(target, source):
        t.mul_(decay).add_(s, alpha=1 - decay)


params = [torch.randn(8, device="cuda") for _ in range(3)]
ema = [p.clone() for p in params]
ema_update(ema, params, 0.9)
g = torch.cuda.CUDAGraph()
decay = 0.9
with torch.cuda.graph(g):
    ema_update(ema, params, decay)  # expect: CG601
for step in range(10):
    decay = min(0.999, (1 + step) / (10 + step))
    g.replay()
