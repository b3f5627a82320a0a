"""CG701: A slice length read with `int(t.max())` inside capture."""
# cglint: skip-file
from _harness import *

SEVERITY = "error"


def hazard():
    q = torch.randn(4, 1, 16, device=DEV)
    k_cache = torch.randn(4, 64, 16, device=DEV)
    lengths = torch.randint(1, 64, (4,), device=DEV)

    def attend():
        n = int(lengths.max())
        k = k_cache[:, :n]
        return q @ k.transpose(-1, -2)

    capture(attend)
