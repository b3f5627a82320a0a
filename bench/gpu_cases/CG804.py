"""CG804: `capture_begin()` on the default stream."""
# cglint: skip-file
from _harness import *

SEVERITY = "error"


def hazard():
    x = torch.randn(1024, device=DEV)
    side_warmup(lambda: x * 2)
    phase("capture")
    g = torch.cuda.CUDAGraph()
    g.capture_begin()
    y = x * 2
    g.capture_end()
