"""CG302: `np.random.normal` added to a tensor inside capture."""
# cglint: skip-file
from _harness import *

SEVERITY = "warning"
MEASURE = "max abs difference over 8 steps, replay versus eager, with numpy's RNG reseeded identically"


import numpy as np


def hazard():
    x = torch.zeros(256, device=DEV)

    def jitter():
        return x + np.random.normal(0.0, 0.01)

    graph, out = capture(jitter)
    np.random.seed(0)
    replays = []
    for _ in range(8):
        replay(graph)
        replays.append(out.clone())
    phase("eager")
    np.random.seed(0)
    eager = [jitter() for _ in range(8)]
    return max(maxdiff(a, b) for a, b in zip(replays, eager))
