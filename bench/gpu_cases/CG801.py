"""CG801: Work on a side stream in capture without forking it from the capturing stream."""
# cglint: skip-file
from _harness import *

SEVERITY = "error"


def hazard():
    side = torch.cuda.Stream()
    x = torch.randn(1024, device=DEV)

    def step():
        with torch.cuda.stream(side):
            aux = x * 2
        out = x + 1
        torch.cuda.current_stream().wait_stream(side)
        return out, aux

    graph, (out, aux) = capture(step)
    x.copy_(torch.randn_like(x))
    replay(graph)
    phase("eager")
    return {"divergence": maxdiff(aux, x * 2), "note": "captured; divergence of the side-stream result"}
