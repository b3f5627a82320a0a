"""CG306: `torch.manual_seed` inside capture."""
# cglint: skip-file
from _harness import *

SEVERITY = "info"


def hazard():
    model = torch.nn.Linear(16, 16, device=DEV)
    x = torch.randn(8, 16, device=DEV)

    def forward():
        torch.manual_seed(1234)
        return model(x)

    capture(forward)
