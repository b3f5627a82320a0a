"""Image-patch classifier: the backbone is graphed with make_graphed_callables, while the
cosine LR schedule and AdamW step stay eager outside the graphs."""
import copy

import torch
import torch.nn as nn
import torch.nn.functional as F


class PatchMLP(nn.Module):
    def __init__(self, patch_dim=48, n_patches=16, d=96, n_classes=10):
        super().__init__()
        self.embed = nn.Linear(patch_dim, d)
        self.token_mix = nn.Linear(n_patches, n_patches)
        self.channel_mix = nn.Sequential(nn.LayerNorm(d), nn.Linear(d, 2 * d), nn.GELU(), nn.Linear(2 * d, d))
        self.head = nn.Linear(d, n_classes)

    def forward(self, patches):
        h = self.embed(patches)
        h = h + self.token_mix(h.transpose(1, 2)).transpose(1, 2)
        h = h + self.channel_mix(h)
        return self.head(h.mean(dim=1))


class Trainer:
    def __init__(self, model, steps, base_lr=3e-3):
        self.model = model
        self.opt = torch.optim.AdamW(model.parameters(), lr=base_lr, weight_decay=0.05)
        self.sched = torch.optim.lr_scheduler.CosineAnnealingLR(self.opt, T_max=steps, eta_min=1e-4)
        self.step_count = 0

    def step(self, x, y):
        self.opt.zero_grad(set_to_none=True)
        logits = self.model(x)
        loss = F.cross_entropy(logits, y, label_smoothing=0.1)
        loss.backward()
        self.opt.step()
        self.sched.step()
        self.step_count += 1
        return loss.detach().clone(), logits.detach().clone()


def make_data(steps, batch=32, n_patches=16, patch_dim=48):
    g = torch.Generator(device="cuda").manual_seed(8)
    return [(torch.randn(batch, n_patches, patch_dim, device="cuda", generator=g),
             torch.randint(0, 10, (batch,), device="cuda", generator=g)) for _ in range(steps)]


def main():
    torch.manual_seed(0)
    torch.backends.cuda.matmul.allow_tf32 = False
    steps = 8
    base = PatchMLP().cuda()
    data = make_data(steps)

    eager_tr = Trainer(copy.deepcopy(base), steps)
    eager = [eager_tr.step(x, y) for x, y in data]

    try:
        model = copy.deepcopy(base)
        sample = torch.randn(32, 16, 48, device="cuda")
        model = torch.cuda.make_graphed_callables(model, (sample,))
        graph_tr = Trainer(model, steps)
        graphed = []
        for x, y in data:
            graphed.append(graph_tr.step(x, y))
        torch.cuda.synchronize()
    except Exception as exc:
        print("graphed run raised:", type(exc).__name__, (str(exc).splitlines() or [""])[0])
        print("VERDICT: FAILS")
        return
    diverged = False
    for i, ((le, oe), (lg, og)) in enumerate(zip(eager, graphed)):
        ok = torch.allclose(le, lg, rtol=1e-4, atol=1e-5) and torch.allclose(oe, og, rtol=1e-3, atol=1e-4)
        print(f"step {i}: lr-scheduled loss eager {le.item():.5f} graphed {lg.item():.5f} match={ok}")
        diverged |= not ok
    print(f"final lr {graph_tr.opt.param_groups[0]['lr']:.2e}")
    print("VERDICT: DIVERGES" if diverged else "VERDICT: OK")


if __name__ == "__main__":
    main()
