"""CG956: Outputs of a `mode="reduce-overhead"` function appended to a list in a loop without `.clone()`."""
# cglint: skip-file
from _harness import *

SEVERITY = "warning"
MEASURE = "max abs difference between the kept outputs and the eager results of their inputs (control: the same loop with .clone())"


def hazard():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.GELU(), torch.nn.Linear(64, 64)).to(DEV)
    step = torch.compile(model, mode="reduce-overhead")
    inputs = [torch.randn(8, 64, device=DEV) for _ in range(6)]
    with torch.no_grad():
        phase("warmup")
        for x in inputs[:3]:
            step(x).clone()  # the first calls warm up and record the CUDA graph
        phase("replay")
        kept, cloned = [], []
        for x in inputs:
            kept.append(step(x))
        for x in inputs:
            cloned.append(step(x).clone())
        torch.cuda.synchronize()
        phase("eager")
        expected = [model(x) for x in inputs]
    return {
        "divergence": max(maxdiff(k, e) for k, e in zip(kept, expected)),
        "control": max(maxdiff(c, e) for c, e in zip(cloned, expected)),
    }
