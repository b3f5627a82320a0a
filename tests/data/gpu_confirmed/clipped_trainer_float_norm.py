import copy
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class Seq2Vec(nn.Module):
    def __init__(self, d=32, n_out=8):
        super().__init__()
        self.mix = nn.Linear(d, d)
        self.out = nn.Linear(d, n_out)

    def forward(self, x):
        h = torch.relu(self.mix(x)).mean(dim=1)
        return self.out(h)


class ClippedTrainer:
    def __init__(self, model, lr=0.05, max_norm=1.0):
        self.model = model
        self.max_norm = max_norm
        self.opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.0)
        self.skipped = 0

    def _grad_norm(self):
        grads = [p.grad for p in self.model.parameters() if p.grad is not None]
        return torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads]))

    def _grads_are_finite(self):
        norm = self._grad_norm()
        return math.isfinite(float(norm)), norm  # expect: CG101

    def _clip_(self, norm):
        coef = torch.clamp(self.max_norm / (norm + 1e-6), max=1.0)
        for p in self.model.parameters():
            p.grad.mul_(coef)

    def train_step(self, x, y):
        loss = F.mse_loss(self.model(x), y)
        loss.backward()
        finite, norm = self._grads_are_finite()
        if finite:
            self._clip_(norm)
            self.opt.step()
        else:
            self.skipped += 1  # expect: CG505
        return loss.detach()


def main():
    torch.manual_seed(0)
    dev = torch.device("cuda")
    batches = [(torch.randn(16, 10, 32, device=dev), torch.randn(16, 8, device=dev)) for _ in range(8)]
    base = Seq2Vec().to(dev)

    eager = ClippedTrainer(copy.deepcopy(base))
    ref = []
    for x, y in batches:
        eager.opt.zero_grad(set_to_none=True)
        ref.append(eager.train_step(x, y).item())

    try:
        tr = ClippedTrainer(copy.deepcopy(base))
        init_state = copy.deepcopy(tr.model.state_dict())
        sx, sy = batches[0][0].clone(), batches[0][1].clone()
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(3):
                tr.opt.zero_grad(set_to_none=True)
                tr.train_step(sx, sy)
        torch.cuda.current_stream().wait_stream(s)
        tr.opt.zero_grad(set_to_none=True)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            static_loss = tr.train_step(sx, sy)
        tr.model.load_state_dict(init_state)
        got = []
        for x, y in batches:
            sx.copy_(x)
            sy.copy_(y)
            graph.replay()
            got.append(static_loss.item())
    except Exception as e:
        print(f"graph error: {type(e).__name__}: {str(e)[:300]}")
        print("VERDICT: FAILS")
        return
    ok = all(math.isclose(a, b, rel_tol=1e-4, abs_tol=1e-6) for a, b in zip(ref, got))
    print("VERDICT: OK" if ok else "VERDICT: DIVERGES")


if __name__ == "__main__":
    main()
