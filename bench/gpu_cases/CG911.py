"""CG911: `.item()` in a function compiled with `fullgraph=True` and `mode="reduce-overhead"`."""
# cglint: skip-file
from _harness import *

SEVERITY = "error"


def hazard():
    @torch.compile(mode="reduce-overhead", fullgraph=True)
    def normalize(x):
        scale = x.abs().max().item()
        return x / scale

    x = torch.randn(1024, device=DEV)
    phase("capture")  # the first call compiles: a graph break under fullgraph=True raises here
    normalize(x)
    torch.cuda.synchronize()
