"""CG906: make_graphed_callables on a module with a forward hook."""
# cglint: skip-file
from _harness import *

SEVERITY = "error"


def hazard():
    model = torch.nn.Linear(16, 16, device=DEV)
    model.register_forward_hook(lambda m, i, o: None)
    sample = torch.randn(8, 16, device=DEV, requires_grad=True)
    phase("capture")
    torch.cuda.make_graphed_callables(model, (sample,))
