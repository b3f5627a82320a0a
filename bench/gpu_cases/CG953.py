"""CG953: `torch.cuda.empty_cache()` inside capture."""
# cglint: skip-file
from _harness import *

SEVERITY = "info"


def hazard():
    model = torch.nn.Linear(64, 64, device=DEV)
    x = torch.randn(32, 64, device=DEV)
    junk = [torch.randn(1 << 20, device=DEV) for _ in range(4)]
    del junk  # cached, unused blocks for empty_cache to release

    def step():
        out = model(x)
        torch.cuda.empty_cache()
        return out

    capture(step)
