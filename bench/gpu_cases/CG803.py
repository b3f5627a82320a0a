"""CG803: An in-place add sent to the default stream inside capture."""
# cglint: skip-file
from _harness import *

SEVERITY = "warning"
MEASURE = "max abs difference of the output, replay versus eager"


def hazard():
    out = torch.zeros(1024, device=DEV)
    src = torch.ones(1024, device=DEV)

    def scatter_add():
        with torch.cuda.stream(torch.cuda.default_stream()):
            out.add_(src)
        return out

    graph, _ = capture(scatter_add)
    out.zero_()
    replay(graph)
    replayed = out.clone()
    phase("eager")
    out.zero_()
    scatter_add()
    torch.cuda.synchronize()
    return maxdiff(replayed, out)
