"""CG111: `clip_grad_norm_(..., error_if_nonfinite=True)` inside capture."""
# cglint: skip-file
from _harness import *

SEVERITY = "error"


def hazard():
    model = torch.nn.Linear(16, 16, device=DEV)
    x = torch.randn(8, 16, device=DEV)

    def step():
        model(x).sum().backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0, error_if_nonfinite=True)

    capture(step)
