"""CG901: A forward and backward pass captured in a fresh process with no warmup."""
# cglint: skip-file
from _harness import *

SEVERITY = "error"


def hazard():
    model = torch.nn.Linear(64, 64, device=DEV)
    x = torch.randn(32, 64, device=DEV)
    graph, _ = capture(lambda: model(x).square().mean().backward(), warmup=False)
    replay(graph)
    grad = model.weight.grad.clone()
    model.weight.grad = None
    phase("eager")
    model(x).square().mean().backward()
    return {"divergence": maxdiff(grad, model.weight.grad), "note": "captured without warmup"}
