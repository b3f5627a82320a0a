"""Class attributes read in capture through `self.x` and `super().x`, changed between replays
through a classmethod (`cls.x = ...`), `type(self).x = ...` and the base class itself."""
import torch

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


class Augment:
    bias = 0.0


class Scaled(Augment):
    gain = 1.0
    shift = 0.0

    @classmethod
    def set_gain(cls, gain):
        cls.gain = gain

    def set_shift(self, shift):
        type(self).shift = shift

    def __call__(self, x):
        y = x * self.gain  # expect: CG601
        y = y + self.shift  # expect: CG601
        return y + super().bias  # expect: CG601


def check(name):
    g.replay()
    same = torch.allclose(static_y, aug(static_x))
    print(f"CASE {name}: {'MATCHES' if same else 'DIVERGES'}")
    return same


aug = Scaled()
static_x = torch.randn(16, device=DEVICE)
aug(static_x)  # warmup
g = torch.cuda.CUDAGraph()
with torch.cuda.graph(g):
    static_y = aug(static_x)

Scaled.set_gain(2.0)
same = check("classmethod")
Scaled.set_gain(1.0)
aug.set_shift(0.5)
same &= check("type(self)")
aug.set_shift(0.0)
Augment.bias = -1.0
same &= check("super()")
print("VERDICT MATCHES" if same else "VERDICT DIVERGES")
