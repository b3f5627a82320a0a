"""CG402: torch.tensor(list, device="cuda") inside capture."""
# cglint: skip-file
from _harness import *

SEVERITY = "error"


def hazard():
    x = torch.randn(8, 4, device=DEV)
    capture(lambda: x + torch.tensor([0, 1, 2, 3], device=DEV))
