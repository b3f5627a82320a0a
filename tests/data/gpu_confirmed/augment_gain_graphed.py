import copy
import random
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class AugmentConfig:
    gain: float = 1.0
    offset: float = 0.0
    gain_range: tuple = (0.5, 2.0)
    offset_range: tuple = (-0.5, 0.5)

    def resample(self, rng):
        self.gain = rng.uniform(*self.gain_range)
        self.offset = rng.uniform(*self.offset_range)


class AugmentedEncoder(nn.Module):
    def __init__(self, aug, in_dim=24, hidden=64, out_dim=8):
        super().__init__()
        self.aug = aug
        self.net = nn.Sequential(
            nn.Linear(in_dim, hidden),
            nn.GELU(),
            nn.Linear(hidden, hidden),
            nn.GELU(),
            nn.Linear(hidden, out_dim),
        )

    def forward(self, x):
        x = x * self.aug.gain + self.aug.offset  # expect: CG601
        return self.net(x)


def sgd_step(model, opt, x, y):
    out = model(x)
    loss = F.mse_loss(out, y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    return out.detach()


def main():
    torch.manual_seed(0)
    rng = random.Random(0)
    batch, in_dim = 32, 24

    aug = AugmentConfig()
    model = AugmentedEncoder(aug, in_dim=in_dim).cuda()
    reference = copy.deepcopy(model)
    reference.aug = aug

    sample = torch.randn(batch, in_dim, device="cuda")
    model = torch.cuda.make_graphed_callables(model, (sample,))

    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    ref_opt = torch.optim.SGD(reference.parameters(), lr=0.05)

    xs = torch.randn(10, batch, in_dim, device="cuda")
    ys = torch.randn(10, batch, 8, device="cuda")
    agree = []
    for x, y in zip(xs, ys):
        aug.resample(rng)
        out = sgd_step(model, opt, x, y)
        ref_out = sgd_step(reference, ref_opt, x, y)
        agree.append(torch.allclose(out, ref_out, rtol=1e-4, atol=1e-5))

    same_params = all(
        torch.allclose(p, q, rtol=1e-4, atol=1e-5)
        for p, q in zip(model.parameters(), reference.parameters())
    )
    torch.cuda.synchronize()
    print("VERDICT MATCHES" if all(agree) and same_params else "VERDICT DIVERGES")


if __name__ == "__main__":
    main()
