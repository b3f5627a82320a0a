"""CG109: `.pin_memory()` inside capture."""
# cglint: skip-file
from _harness import *

SEVERITY = "info"


def hazard():
    host_buffer = torch.randn(1 << 16)
    x = torch.randn(8, device=DEV)

    def step():
        staging = host_buffer.pin_memory()
        return x * 2, staging

    capture(step)
