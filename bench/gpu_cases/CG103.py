"""CG103: `print` of a tensor inside capture."""
# cglint: skip-file
from _harness import *

SEVERITY = "error"


def hazard():
    x = torch.randn(8, 16, device=DEV)

    def forward():
        h = torch.relu(x)
        print("hidden", h)
        return h

    with contextlib.redirect_stdout(io.StringIO()):
        capture(forward)
