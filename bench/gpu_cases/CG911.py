"""CG911: `print` of a tensor in a function compiled with `fullgraph=True` and `mode="reduce-overhead"`."""
# cglint: skip-file
from _harness import *

SEVERITY = "error"


def hazard():
    @torch.compile(mode="reduce-overhead", fullgraph=True)
    def normalize(x):
        print("max", x.abs().max())
        return x / x.abs().max()

    x = torch.randn(1024, device=DEV)
    phase("capture")  # the first call compiles: a graph break under fullgraph=True raises here
    normalize(x)
    torch.cuda.synchronize()
