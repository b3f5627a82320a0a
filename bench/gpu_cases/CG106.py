"""CG106: Boolean-mask assignment inside capture."""
# cglint: skip-file
from _harness import *

SEVERITY = "error"


def hazard():
    x = torch.randn(64, 16, device=DEV)

    def clip_outliers():
        x[x.abs() > 3.0] = 0.0
        return x

    capture(clip_outliers)
