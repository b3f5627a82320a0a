"""CG955: Static outputs appended to a list across replays without `.clone()`."""
# cglint: skip-file
from _harness import *

SEVERITY = "warning"
MEASURE = "max abs difference between the kept entries and the eager results of their batches"


def hazard():
    static_x = torch.zeros(8, device=DEV)
    graph, static_y = capture(lambda: static_x * 2)
    batches = [torch.full((8,), float(i), device=DEV) for i in range(4)]
    kept = []
    for batch in batches:
        static_x.copy_(batch)
        replay(graph)
        kept.append(static_y)
    phase("eager")
    return max(maxdiff(k, b * 2) for k, b in zip(kept, batches))
