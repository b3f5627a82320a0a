from dataclasses import dataclass

import torch
import torch.nn as nn


@dataclass
class DistillConfig:
    in_dim: int = 32
    n_classes: int = 20
    teacher_hidden: int = 128
    student_hidden: int = 32
    batch: int = 16
    taus: tuple = (1.0, 2.0, 4.0, 8.0)


def mlp(in_dim, hidden, out_dim):
    return nn.Sequential(nn.Linear(in_dim, hidden), nn.ReLU(), nn.Linear(hidden, out_dim))


class SoftTargetKL(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("tau", torch.ones(()))

    def set_temperature(self, t: float):
        self.tau.fill_(t)

    def forward(self, student_logits, teacher_logits):
        p_t = torch.softmax(teacher_logits / self.tau, dim=-1)
        log_p_s = torch.log_softmax(student_logits / self.tau, dim=-1)
        kl = (p_t * (p_t.clamp_min(1e-8).log() - log_p_s)).sum(-1)
        return kl * self.tau * self.tau


class DistillProbe:
    def __init__(self, teacher, student, criterion, cfg: DistillConfig, device):
        self.teacher, self.student, self.criterion = teacher, student, criterion
        self.static_x = torch.zeros(cfg.batch, cfg.in_dim, device=device)
        self.graph = torch.cuda.CUDAGraph()

    def _measure(self):
        return self.criterion(self.student(self.static_x), self.teacher(self.static_x))

    def capture(self):
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(3):
                self._measure()
        torch.cuda.current_stream().wait_stream(s)
        with torch.cuda.graph(self.graph):
            self.static_kl = self._measure()

    def __call__(self, x):
        self.static_x.copy_(x)
        self.graph.replay()
        return self.static_kl.clone()


def sweep(criterion, measure, batches, taus):
    results = []
    for tau in taus:
        criterion.set_temperature(tau)
        results.extend(measure(x) for x in batches)
    return results


@torch.no_grad()
def main():
    torch.manual_seed(0)
    torch.backends.cuda.matmul.allow_tf32 = False
    cfg, device = DistillConfig(), torch.device("cuda")
    teacher = mlp(cfg.in_dim, cfg.teacher_hidden, cfg.n_classes).to(device).eval()
    student = mlp(cfg.in_dim, cfg.student_hidden, cfg.n_classes).to(device).eval()
    batches = [torch.randn(cfg.batch, cfg.in_dim, device=device) * 2.0 for _ in range(3)]

    criterion = SoftTargetKL().to(device)
    probe = DistillProbe(teacher, student, criterion, cfg, device)
    probe.capture()
    replayed = sweep(criterion, probe, batches, cfg.taus)

    ref_criterion = SoftTargetKL().to(device)
    eager = lambda x: ref_criterion(student(x), teacher(x))
    reference = sweep(ref_criterion, eager, batches, cfg.taus)

    same = all(torch.allclose(a, b, atol=1e-4, rtol=1e-4) for a, b in zip(replayed, reference))
    return "OK" if same else "DIVERGES"


if __name__ == "__main__":
    try:
        verdict = main()
    except Exception as exc:
        print(f"{type(exc).__name__}: {exc}", flush=True)
        verdict = "FAILS"
    print(f"VERDICT: {verdict}", flush=True)
