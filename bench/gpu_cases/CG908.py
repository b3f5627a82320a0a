"""CG908: A torch.compile'd module called for the first time inside a manual capture."""
# cglint: skip-file
from _harness import *

SEVERITY = "error"


def hazard():
    layer = torch.compile(torch.nn.Linear(16, 16, device=DEV))
    x = torch.randn(8, 16, device=DEV)
    graph, y = capture(lambda: layer(x), warmup=False)
    return {"divergence": 0.0, "note": "captured"}
