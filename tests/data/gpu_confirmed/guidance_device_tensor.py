"""CFG sampler whose per-step guidance weight lives in a device tensor refreshed before every replay."""
import math

import torch
import torch.nn as nn


class TinyEpsNet(nn.Module):
    def __init__(self, dim=32, cond_dim=16, hidden=128):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(dim + cond_dim + 1, hidden), nn.SiLU(),
                                 nn.Linear(hidden, hidden), nn.SiLU(), nn.Linear(hidden, dim))

    def forward(self, x, t, cond):
        return self.net(torch.cat([x, cond, t.expand(x.shape[0], 1)], dim=-1))


def guidance_at(step, num_steps, w_start=7.5, w_end=1.5):
    return w_start + (w_end - w_start) * step / max(num_steps - 1, 1)


class GuidedDenoiser(nn.Module):
    def __init__(self, eps_net):
        super().__init__()
        self.eps_net = eps_net
        self.register_buffer("guidance", torch.tensor(7.5))

    def set_guidance(self, w):
        self.guidance.fill_(w)

    def forward(self, x, t, cond, null_cond):
        eps_c = self.eps_net(x, t, cond)
        eps_u = self.eps_net(x, t, null_cond)
        return eps_u + self.guidance * (eps_c - eps_u)


class GraphedDenoiser:
    def __init__(self, denoiser, x, t, cond, null_cond):
        self.denoiser = denoiser
        self.inputs = [x.clone(), t.clone(), cond.clone(), null_cond.clone()]

    @torch.no_grad()
    def capture(self):
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(3):
                self.denoiser(*self.inputs)
        torch.cuda.current_stream().wait_stream(s)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self.out = self.denoiser(*self.inputs)
        return self

    def __call__(self, *args):
        for dst, src in zip(self.inputs, args):
            dst.copy_(src)
        self.graph.replay()
        return self.out


@torch.no_grad()
def sample(denoise_fn, model, x, cond, null_cond, num_steps):
    traj = []
    for i in range(num_steps):
        model.set_guidance(guidance_at(i, num_steps))
        a_t = math.cos((1 - i / num_steps) * math.pi / 2) ** 2 + 1e-3
        a_next = math.cos((1 - (i + 1) / num_steps) * math.pi / 2) ** 2
        t = torch.full((1, 1), 1 - i / num_steps, device=x.device)
        eps = denoise_fn(x, t, cond, null_cond)
        x0 = (x - math.sqrt(1 - a_t) * eps) / math.sqrt(a_t)
        x = math.sqrt(a_next) * x0 + math.sqrt(max(1 - a_next, 0.0)) * eps
        traj.append(x.clone())
    return traj


def main():
    torch.manual_seed(0)
    torch.backends.cuda.matmul.allow_tf32 = False
    steps, batch = 8, 4
    model = GuidedDenoiser(TinyEpsNet()).cuda().eval()
    x_T = torch.randn(batch, 32, device="cuda")
    cond = torch.randn(batch, 16, device="cuda")
    null_cond = torch.zeros(batch, 16, device="cuda")

    eager = sample(model, model, x_T, cond, null_cond, steps)
    try:
        model.set_guidance(guidance_at(0, steps))
        runner = GraphedDenoiser(model, x_T, torch.ones(1, 1, device="cuda"), cond, null_cond).capture()
        graphed = sample(runner, model, x_T, cond, null_cond, steps)
    except Exception as exc:
        print("graphed run raised:", type(exc).__name__, (str(exc).splitlines() or [""])[0])
        print("VERDICT: FAILS")
        return
    diverged = False
    for i, (a, b) in enumerate(zip(eager, graphed)):
        ok = torch.allclose(a, b, rtol=1e-3, atol=1e-4)
        print(f"step {i}: w={guidance_at(i, steps):.2f} max diff {(a - b).abs().max().item():.3e} match={ok}")
        diverged |= not ok
    print("VERDICT: DIVERGES" if diverged else "VERDICT: OK")


if __name__ == "__main__":
    main()
