"""CG403: `resize_` of an output inside capture (no warmup, as in the example)."""
# cglint: skip-file
from _harness import *

SEVERITY = "info"
MEASURE = "max abs difference between the resized output after replay and the input it copies"


def hazard():
    x = torch.randn(8, 16, device=DEV)
    out = torch.empty(0, device=DEV)

    def gather_into():
        out.resize_(x.shape)
        out.copy_(x)
        return out

    graph, _ = capture(gather_into, warmup=False)
    x.copy_(torch.randn(8, 16, device=DEV))
    replay(graph)
    return maxdiff(out, x)
