"""CG501: `print` (of metadata only) inside a captured forward."""
# cglint: skip-file
from _harness import *

SEVERITY = "info"
OUTCOME = "diverged"  # output lines lost at replay, not values: info, but shown as a difference
MEASURE = "lines printed over 5 steps: eager minus replay"


def hazard():
    x = torch.randn(8, 16, device=DEV)

    def forward():
        out = x * 2
        print("forward", tuple(out.shape))
        return out

    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        graph, _ = capture(forward)
        before = buffer.getvalue().count("forward")
        replay(graph, 5)
        replayed = buffer.getvalue().count("forward") - before
        phase("eager")
        for _ in range(5):
            forward()
        eager = buffer.getvalue().count("forward") - before - replayed
    return float(eager - replayed)
