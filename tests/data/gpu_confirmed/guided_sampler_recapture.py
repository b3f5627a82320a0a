from dataclasses import dataclass

import torch
import torch.nn as nn


@dataclass
class SamplerConfig:
    dim: int = 32
    cond_dim: int = 16
    hidden: int = 96
    batch: int = 4
    steps: int = 9
    dt: float = 0.1


class VelocityNet(nn.Module):
    def __init__(self, cfg: SamplerConfig):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(cfg.dim + cfg.cond_dim, cfg.hidden), nn.SiLU(),
                                 nn.Linear(cfg.hidden, cfg.hidden), nn.SiLU(),
                                 nn.Linear(cfg.hidden, cfg.dim))

    def forward(self, x, cond):
        return self.net(torch.cat([x, cond], dim=-1))


class GuidedEulerStep:
    def __init__(self, model, null_cond, dt: float):
        self.model, self.null_cond, self.dt = model, null_cond, dt
        self.guidance = 1.0

    def __call__(self, x, cond):
        v_cond = self.model(x, cond)
        v_uncond = self.model(x, self.null_cond)
        return x + self.dt * (v_uncond + self.guidance * (v_cond - v_uncond))


class GuidedStepGraph:
    def __init__(self, step: GuidedEulerStep, x_like, cond_like):
        self.step = step
        self.static_x = torch.zeros_like(x_like)
        self.static_cond = torch.zeros_like(cond_like)
        self.graph, self.captured_guidance = None, None

    def _capture(self):
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(3):
                self.step(self.static_x, self.static_cond)
        torch.cuda.current_stream().wait_stream(s)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self.static_next = self.step(self.static_x, self.static_cond)
        self.captured_guidance = self.step.guidance

    def __call__(self, x, cond):
        if self.graph is None or self.captured_guidance != self.step.guidance:
            self._capture()
        self.static_x.copy_(x)
        self.static_cond.copy_(cond)
        self.graph.replay()
        return self.static_next.clone()


def guidance_schedule(i: int) -> float:
    return 1.0 if i < 3 else (3.0 if i < 6 else 5.0)


def sample(step, runner, x0, cond, n_steps):
    x, traj = x0, []
    for i in range(n_steps):
        step.guidance = guidance_schedule(i)
        x = runner(x, cond)
        traj.append(x)
    return traj


@torch.no_grad()
def main():
    torch.manual_seed(0)
    torch.backends.cuda.matmul.allow_tf32 = False
    cfg, device = SamplerConfig(), torch.device("cuda")
    model = VelocityNet(cfg).to(device).eval()
    null_cond = torch.zeros(cfg.batch, cfg.cond_dim, device=device)
    x0 = torch.randn(cfg.batch, cfg.dim, device=device)
    cond = torch.randn(cfg.batch, cfg.cond_dim, device=device)

    step = GuidedEulerStep(model, null_cond, cfg.dt)
    replayed = sample(step, GuidedStepGraph(step, x0, cond), x0, cond, cfg.steps)
    ref_step = GuidedEulerStep(model, null_cond, cfg.dt)
    reference = sample(ref_step, ref_step, x0, cond, cfg.steps)

    same = all(torch.allclose(a, b, atol=1e-4, rtol=1e-4) for a, b in zip(replayed, reference))
    return "OK" if same else "DIVERGES"


if __name__ == "__main__":
    try:
        verdict = main()
    except Exception as exc:
        print(f"{type(exc).__name__}: {exc}", flush=True)
        verdict = "FAILS"
    print(f"VERDICT: {verdict}", flush=True)
