"""CG307: `torch.rand(()).item()` scaling a tensor inside capture."""
# cglint: skip-file
from _harness import *

SEVERITY = "warning"
MEASURE = "max abs difference over 16 steps, replay versus eager, with the CPU generator reseeded identically"


def hazard():
    x = torch.ones(1024, device=DEV)

    def jitter():
        return x * (1.0 + torch.rand(()).item())

    graph, out = capture(jitter)
    torch.manual_seed(0)
    replays = []
    for _ in range(16):
        replay(graph)
        replays.append(out.clone())
    phase("eager")
    torch.manual_seed(0)
    eager = [jitter() for _ in range(16)]
    return max(maxdiff(a, b) for a, b in zip(replays, eager))
