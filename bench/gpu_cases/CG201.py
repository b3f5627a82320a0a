"""CG201: `if norm > 1.0:` on a tensor inside capture."""
# cglint: skip-file
from _harness import *

SEVERITY = "error"


def hazard():
    param = torch.randn(16, device=DEV)
    grad = torch.randn(16, device=DEV)

    def update():
        g = grad
        norm = g.norm()
        if norm > 1.0:
            g = g / norm
        param.add_(g, alpha=-0.1)

    capture(update)
