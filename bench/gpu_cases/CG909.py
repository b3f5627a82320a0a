"""CG909: An `is_current_stream_capturing()` branch with a cheaper path under capture."""
# cglint: skip-file
from _harness import *

SEVERITY = "warning"
MEASURE = "max abs difference, replay versus eager"


def rms_norm(x, weight, eps):
    if torch.cuda.is_current_stream_capturing():
        return x * weight
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight


def hazard():
    x = torch.randn(8, 64, device=DEV)
    w = torch.ones(64, device=DEV)
    graph, out = capture(lambda: rms_norm(x, w, 1e-6))
    replay(graph)
    phase("eager")
    return maxdiff(out, rms_norm(x, w, 1e-6))
