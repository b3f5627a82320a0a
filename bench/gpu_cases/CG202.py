"""CG202: A branch on a call counter the module increments itself."""
# cglint: skip-file
from _harness import *

SEVERITY = "warning"
MEASURE = "max abs difference between a replay and the eager call at the same step"


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        if self.calls % 2 == 0:
            x = x * 0.5
        return x * 1.0


def hazard():
    model = Model()
    x = torch.randn(64, device=DEV)
    graph, out = capture(lambda: model(x))  # 3 warmup calls, then the 4th (even) is captured
    replay(graph)
    phase("eager")
    eager = model(x)  # the 5th call takes the other branch
    return maxdiff(out, eager)
