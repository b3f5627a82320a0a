"""CG910: make_graphed_callables inside autocast with its cache on."""
# cglint: skip-file
from _harness import *

SEVERITY = "error"


def hazard():
    model = torch.nn.Linear(16, 16, device=DEV)
    sample = torch.randn(8, 16, device=DEV, requires_grad=True)
    with torch.autocast("cuda", dtype=torch.float16):
        phase("capture")
        torch.cuda.make_graphed_callables(model, (sample,))
