"""CG102: `.cpu()` of an argmax inside capture."""
# cglint: skip-file
from _harness import *

SEVERITY = "error"


def hazard():
    logits = torch.randn(8, 100, device=DEV)
    capture(lambda: logits.argmax(-1).cpu())
