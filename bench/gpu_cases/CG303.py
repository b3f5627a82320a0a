"""CG303: `torch.randn(shape).cuda()` (CPU RNG copied to the device) inside capture."""
# cglint: skip-file
from _harness import *

SEVERITY = "error"


def hazard():
    x = torch.randn(8, 16, device=DEV)
    capture(lambda: x + torch.randn(x.shape).cuda())
