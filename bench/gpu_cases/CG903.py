"""CG903: A capture inside an autocast block whose cache holds casts made during warmup."""
# cglint: skip-file
from _harness import *

SEVERITY = "warning"
MEASURE = "max abs difference, replay versus eager, after a weight update"


def hazard():
    model = torch.nn.Linear(64, 64, device=DEV)
    x = torch.randn(32, 64, device=DEV)
    with torch.autocast("cuda", dtype=torch.float16):
        graph, y = capture(lambda: model(x))
    with torch.no_grad():
        model.weight.add_(0.5)
    replay(graph)
    phase("eager")
    with torch.autocast("cuda", dtype=torch.float16):
        eager = model(x)
    return maxdiff(y, eager)
