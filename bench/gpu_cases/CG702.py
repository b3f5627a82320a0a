"""CG702: A static buffer sliced by a host length that changes between replays."""
# cglint: skip-file
from _harness import *

SEVERITY = "warning"
MEASURE = "max abs difference of the sum, replay versus eager, after the length changed"


def hazard():
    static_x = torch.randn(64, 16, device=DEV)
    state = {"n": 8}
    graph, total = capture(lambda: static_x[: state["n"]].sum(0))
    state["n"] = 32
    replay(graph)
    phase("eager")
    return maxdiff(total, static_x[: state["n"]].sum(0))
