"""CG904: `checkpoint(..., use_reentrant=False)` with the default preserve_rng_state inside capture."""
# cglint: skip-file
from _harness import *

SEVERITY = "info"


from torch.utils.checkpoint import checkpoint


def hazard():
    block = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.ReLU(), torch.nn.Linear(16, 16)).to(DEV)
    x = torch.randn(8, 16, device=DEV, requires_grad=True)
    capture(lambda: checkpoint(block, x, use_reentrant=False).sum().backward())
