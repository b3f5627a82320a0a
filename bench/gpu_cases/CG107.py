"""CG107: `torch.unique` inside capture."""
# cglint: skip-file
from _harness import *

SEVERITY = "error"


def hazard():
    ids = torch.randint(0, 8, (64,), device=DEV)
    capture(lambda: torch.unique(ids))
