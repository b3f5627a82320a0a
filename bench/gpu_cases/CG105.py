"""CG105: `torch.nonzero` inside capture."""
# cglint: skip-file
from _harness import *

SEVERITY = "error"


def hazard():
    x = torch.randn(64, 16, device=DEV)
    capture(lambda: x[torch.nonzero(x.sum(-1) > 0)])
