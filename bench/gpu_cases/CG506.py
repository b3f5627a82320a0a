"""CG506: `time.perf_counter()` read inside a captured step."""
# cglint: skip-file
from _harness import *

SEVERITY = "warning"
MEASURE = "seconds by which the clock read after a replay lags behind one read by an eager step"


class Clock:
    last = 0.0


def hazard():
    x = torch.randn(8, 16, device=DEV)

    def step():
        Clock.last = time.perf_counter()
        return x * 2

    graph, _ = capture(step)
    time.sleep(0.05)
    replay(graph)
    after_replay = Clock.last
    phase("eager")
    step()
    return Clock.last - after_replay
