"""CG404: `del` of a captured input, then a new allocation, then replay."""
# cglint: skip-file
from _harness import *

SEVERITY = "warning"
MEASURE = "max abs difference between the replay output and what the freed input gave"


def hazard():
    env = {"x": torch.randn(1 << 16, device=DEV)}
    graph, y = capture(lambda: env["x"] * 2)
    expected = env["x"] * 2
    del env["x"]  # the last reference: the block goes back to the allocator
    other = torch.full((1 << 16,), 7.0, device=DEV)
    replay(graph)
    del other
    return maxdiff(y, expected)
