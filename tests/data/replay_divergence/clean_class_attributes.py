"""The twin of class_attributes.py: the class attributes change before the capture, are
changed and restored before a replay, and change after the last replay."""
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
        y = x * self.gain
        y = y + self.shift
        return y + super().bias


def check(name):
    g.replay()
    same = torch.allclose(static_y, aug(static_x))
    print(f"CASE {name}: {'MATCHES' if same else 'DIVERGES'}")
    return same


aug = Scaled()
Scaled.set_gain(2.0)  # before the capture: the graph has it
static_x = torch.randn(16, device=DEVICE)
aug(static_x)  # warmup
g = torch.cuda.CUDAGraph()
with torch.cuda.graph(g):
    static_y = aug(static_x)

saved = Scaled.gain
Scaled.set_gain(saved * 3)
Scaled.set_gain(saved)  # restored before the replay
static_x.copy_(torch.randn(16, device=DEVICE))
same = check("classmethod restored")
aug.set_shift(1.0)  # after the last replay
Augment.bias = 2.0
print("VERDICT MATCHES" if same else "VERDICT DIVERGES")
