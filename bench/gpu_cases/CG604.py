"""CG604: A Python number that changes on every call passed to a function compiled with CUDA graphs."""
# cglint: skip-file
from _harness import *

SEVERITY = "info"
MEASURE = "max abs difference from eager over 12 calls with a changing step (results stay right); the note counts the compiled frames"


def hazard():
    torch.manual_seed(0)
    import torch._dynamo as dynamo

    model = torch.nn.Linear(64, 64).to(DEV)

    def step_fn(x, step):
        return model(x) * (1.0 + step / 100.0)

    compiled = torch.compile(step_fn, mode="reduce-overhead")
    x = torch.randn(8, 64, device=DEV)
    dynamo.utils.counters.clear()
    with torch.no_grad():
        phase("replay")
        worst = 0.0
        for step in range(12):
            out = compiled(x, step).clone()
            worst = max(worst, maxdiff(out, step_fn(x, step)))
        torch.cuda.synchronize()
    frames = dict(dynamo.utils.counters["stats"])
    return {"divergence": worst, "control": 0.0,
            "note": f"results right; dynamo stats over 12 calls: {frames}"}
