"""CG106: Reading through a boolean mask inside capture."""
# cglint: skip-file
from _harness import *

SEVERITY = "error"


def hazard():
    x = torch.randn(64, 16, device=DEV)

    capture(lambda: x[x.abs() < 3.0].mean())
