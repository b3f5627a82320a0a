"""CG802: A forked side stream never joined back before the capture ends."""
# cglint: skip-file
from _harness import *

SEVERITY = "error"


def hazard():
    side = torch.cuda.Stream()
    x = torch.randn(1024, device=DEV)

    def step():
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            aux = x * 2
        return x + 1, aux

    graph, (out, aux) = capture(step)
    x.copy_(torch.randn_like(x))
    replay(graph)
    phase("eager")
    return {"divergence": maxdiff(aux, x * 2), "note": "captured; divergence of the side-stream result"}
