"""CG305: `torch.Generator(device=...)` constructed inside capture."""
# cglint: skip-file
from _harness import *

SEVERITY = "error"


def hazard():
    probs = torch.softmax(torch.randn(4, 32, device=DEV), -1)

    def sample():
        torch.Generator(device=probs.device)
        return torch.multinomial(probs, 1)

    capture(sample)
