"""CG503: Appending a line to a file inside a captured step."""
# cglint: skip-file
from _harness import *

SEVERITY = "warning"
MEASURE = "lines written over 5 steps: eager minus replay"


def hazard():
    path = os.path.join(tempfile.mkdtemp(), "steps.log")
    x = torch.randn(8, 16, device=DEV)

    def step():
        with open(path, "a") as f:
            f.write("step\n")
        return x * 2

    graph, _ = capture(step)
    before = open(path).read().count("step")
    replay(graph, 5)
    replayed = open(path).read().count("step") - before
    phase("eager")
    for _ in range(5):
        step()
    eager = open(path).read().count("step") - before - replayed
    return float(eager - replayed)
