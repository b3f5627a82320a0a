"""CG301: `random.random()` deciding a branch inside capture."""
# cglint: skip-file
from _harness import *

SEVERITY = "warning"
MEASURE = "max abs difference over 16 steps, replay versus eager, with the host RNG reseeded identically"


import random


def hazard():
    x = torch.ones(1024, device=DEV)

    def maybe_drop():
        if random.random() < 0.5:
            return torch.zeros_like(x)
        return x * 1.0

    graph, out = capture(maybe_drop)
    random.seed(0)
    replays = []
    for _ in range(16):
        replay(graph)
        replays.append(out.clone())
    phase("eager")
    random.seed(0)
    eager = [maybe_drop() for _ in range(16)]
    return max(maxdiff(a, b) for a, b in zip(replays, eager))
