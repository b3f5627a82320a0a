import math

import torch
import torch.nn as nn


class EpsNet(nn.Module):
    def __init__(self, d=32, n_classes=10, d_t=16):
        super().__init__()
        self.cls = nn.Embedding(n_classes + 1, d_t)
        self.t_proj = nn.Linear(1, d_t)
        self.body = nn.Sequential(nn.Linear(d + 2 * d_t, 128), nn.SiLU(), nn.Linear(128, d))

    def forward(self, x, t, y):
        h = torch.cat([x, self.t_proj(t), self.cls(y)], dim=-1)
        return self.body(h)


def make_alphas(n_steps):
    t = torch.linspace(0, 1, n_steps + 1)
    return torch.cos(t * 0.48 * math.pi) ** 2


class GuidedDDIM:
    def __init__(self, net, hparams, batch, dim, null_class):
        self.net = net
        self.hp = hparams
        dev = next(net.parameters()).device
        self.x = torch.zeros(batch, dim, device=dev)
        self.t = torch.zeros(batch, 1, device=dev)
        self.coef = torch.zeros(2, device=dev)
        self.y = torch.zeros(batch, dtype=torch.long, device=dev)
        self.y_null = torch.full((batch,), null_class, dtype=torch.long, device=dev)

    def _guided_eps(self):
        eps_c = self.net(self.x, self.t, self.y)
        eps_u = self.net(self.x, self.t, self.y_null)
        return eps_u + self.hp["guidance_scale"] * (eps_c - eps_u)  # expect: CG601

    def _update(self):
        eps = self._guided_eps()
        a, b = self.coef[0], self.coef[1]
        self.x.copy_(a * self.x + b * eps)

    def build(self):
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(3):
                self._guided_eps()
        torch.cuda.current_stream().wait_stream(s)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self._update()


def ddim_coefs(alphas, i, n):
    a_t, a_s = alphas[n - i], alphas[n - i - 1]
    a = (a_s / a_t).sqrt()
    b = (1 - a_s).sqrt() - a * (1 - a_t).sqrt()
    return torch.stack([a, b]), float(n - i) / n


def guidance_schedule(i, n, w_max=5.0):
    return 1.0 + (w_max - 1.0) * (1 - i / n)


def main():
    torch.manual_seed(0)
    n, batch, dim = 20, 8, 32
    net = EpsNet(dim).cuda().eval()
    alphas = make_alphas(n).cuda()
    x0 = torch.randn(batch, dim, device="cuda")
    labels = torch.randint(0, 10, (batch,), device="cuda")

    with torch.no_grad():
        ref = GuidedDDIM(net, {"guidance_scale": 1.0}, batch, dim, 10)
        ref.x.copy_(x0)
        ref.y.copy_(labels)
        for i in range(n):
            coef, t = ddim_coefs(alphas, i, n)
            ref.coef.copy_(coef)
            ref.t.fill_(t)
            ref.hp["guidance_scale"] = guidance_schedule(i, n)
            ref._update()

        try:
            hp = {"guidance_scale": guidance_schedule(0, n)}
            smp = GuidedDDIM(net, hp, batch, dim, 10)
            smp.y.copy_(labels)
            smp.build()
            smp.x.copy_(x0)
            for i in range(n):
                coef, t = ddim_coefs(alphas, i, n)
                smp.coef.copy_(coef)
                smp.t.fill_(t)
                hp["guidance_scale"] = guidance_schedule(i, n)
                smp.graph.replay()
        except Exception as e:
            print(f"graph error: {type(e).__name__}: {str(e)[:300]}")
            print("VERDICT: FAILS")
            return

    err = (ref.x - smp.x).abs().max().item()
    print(f"max abs diff {err:.3e}")
    print("VERDICT: OK" if torch.allclose(ref.x, smp.x, rtol=1e-3, atol=1e-4) else "VERDICT: DIVERGES")


if __name__ == "__main__":
    main()
