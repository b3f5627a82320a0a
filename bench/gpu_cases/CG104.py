"""CG104: `torch.cuda.synchronize()` inside capture."""
# cglint: skip-file
from _harness import *

SEVERITY = "error"


def hazard():
    x = torch.randn(8, 16, device=DEV)

    def step():
        y = x * 2
        torch.cuda.synchronize()
        return y

    capture(step)
