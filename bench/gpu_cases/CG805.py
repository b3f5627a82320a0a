"""CG805: Timing events created and recorded inside capture, read after replay."""
# cglint: skip-file
from _harness import *

SEVERITY = "warning"
MEASURE = "1.0 when the capture-time timing events cannot be read after replay, else 0.0"


def hazard():
    x = torch.randn(512, 512, device=DEV)
    events = []

    def forward():
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        y = x @ x
        end.record()
        events[:] = [start, end]
        return y

    graph, _ = capture(forward)
    replay(graph, 3)
    start, end = events
    try:
        elapsed = start.elapsed_time(end)
    except RuntimeError as exc:
        return {"divergence": 1.0, "note": "elapsed_time after replay raised: " + str(exc).splitlines()[0]}
    return {"divergence": 0.0, "note": f"elapsed_time after replay: {elapsed:.3f} ms"}
