"""CG304: `generator=` with an unregistered CUDA generator inside capture."""
# cglint: skip-file
from _harness import *

SEVERITY = "error"


def hazard():
    gen = torch.Generator(device=DEV)
    gen.manual_seed(0)
    capture(lambda: torch.randn(16, device=DEV, generator=gen))
