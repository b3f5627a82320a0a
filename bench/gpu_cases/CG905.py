"""CG905: `Adam.step()` captured with capturable left False."""
# cglint: skip-file
from _harness import *

SEVERITY = "error"


def hazard():
    model = torch.nn.Linear(16, 16, device=DEV)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    x = torch.randn(8, 16, device=DEV)

    def step():
        model(x).sum().backward()
        opt.step()

    capture(step)
