"""Classifier-free-guidance sampler whose guidance weight decays over the trajectory."""
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


class GuidedDenoiser(nn.Module):
    def __init__(self, eps_net, num_steps, w_start=7.5, w_end=1.5):
        super().__init__()
        self.eps_net = eps_net
        self.num_steps = num_steps
        self.w_start, self.w_end = w_start, w_end
        self.step_index = 0

    @property
    def guidance_scale(self):
        frac = self.step_index / max(self.num_steps - 1, 1)
        return self.w_start + (self.w_end - self.w_start) * frac

    def forward(self, x, t, cond, null_cond):
        eps_c = self.eps_net(x, t, cond)
        eps_u = self.eps_net(x, t, null_cond)
        return eps_u + self.guidance_scale * (eps_c - eps_u)  # expect: CG601


class GraphedDenoiser:
    def __init__(self, denoiser, x, t, cond, null_cond):
        self.denoiser = denoiser
        self.static = {"x": x.clone(), "t": t.clone(), "cond": cond.clone(), "null": null_cond.clone()}
        self.graph = None

    @torch.no_grad()
    def capture(self):
        st = self.static
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(3):
                self.denoiser(st["x"], st["t"], st["cond"], st["null"])
        torch.cuda.current_stream().wait_stream(s)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self.out = self.denoiser(st["x"], st["t"], st["cond"], st["null"])

    def __call__(self, x, t, cond, null_cond):
        for key, val in zip(("x", "t", "cond", "null"), (x, t, cond, null_cond)):
            self.static[key].copy_(val)
        self.graph.replay()
        return self.out


@torch.no_grad()
def sample(denoise_fn, model, x, cond, null_cond, num_steps):
    """Deterministic DDIM-style loop on a cosine alpha-bar schedule."""
    traj = []
    for i in range(num_steps):
        model.step_index = i
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
    model = GuidedDenoiser(TinyEpsNet().cuda(), steps).cuda().eval()
    x_T = torch.randn(batch, 32, device="cuda")
    cond = torch.randn(batch, 16, device="cuda")
    null_cond = torch.zeros(batch, 16, device="cuda")

    eager = sample(model, model, x_T, cond, null_cond, steps)
    try:
        model.step_index = 0
        runner = GraphedDenoiser(model, x_T, torch.ones(1, 1, device="cuda"), cond, null_cond)
        runner.capture()
        graphed = sample(runner, model, x_T, cond, null_cond, steps)
    except Exception as exc:
        print("graphed run raised:", type(exc).__name__, (str(exc).splitlines() or [""])[0])
        print("VERDICT: FAILS")
        return
    diverged = False
    for i, (a, b) in enumerate(zip(eager, graphed)):
        ok = torch.allclose(a, b, rtol=1e-3, atol=1e-4)
        print(f"step {i}: w={7.5 + (1.5 - 7.5) * i / (steps - 1):.2f} max diff {(a - b).abs().max().item():.3e} match={ok}")
        diverged |= not ok
    print("VERDICT: DIVERGES" if diverged else "VERDICT: OK")


if __name__ == "__main__":
    main()
