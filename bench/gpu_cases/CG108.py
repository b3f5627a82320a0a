"""CG108: `repeat_interleave` with tensor repeats and no output_size."""
# cglint: skip-file
from _harness import *

SEVERITY = "error"


def hazard():
    x = torch.randn(8, 16, device=DEV)
    counts = torch.randint(1, 4, (8,), device=DEV)
    capture(lambda: torch.repeat_interleave(x, counts, dim=0))
