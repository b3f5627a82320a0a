"""CG902: Warmup of a backward pass on the default stream, then capture of it."""
# cglint: skip-file
from _harness import *

SEVERITY = "info"


def hazard():
    model = torch.nn.Linear(64, 64, device=DEV)
    x = torch.randn(32, 64, device=DEV)
    phase("warmup")
    for _ in range(3):
        model(x).sum().backward()
    torch.cuda.synchronize()
    phase("capture")
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        model(x).sum().backward()
    torch.cuda.synchronize()
    return {"divergence": 0.0, "note": "captured"}
