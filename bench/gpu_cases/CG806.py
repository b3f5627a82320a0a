"""CG806: `torch.cuda.set_stream` inside capture."""
# cglint: skip-file
from _harness import *

SEVERITY = "error"


def hazard():
    side = torch.cuda.Stream()
    x = torch.randn(1024, device=DEV)

    def step():
        torch.cuda.set_stream(side)
        return x * 2

    capture(step)
