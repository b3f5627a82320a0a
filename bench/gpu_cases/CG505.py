"""CG505: `self.num_calls += 1` in a captured module's forward."""
# cglint: skip-file
from _harness import *

SEVERITY = "warning"
MEASURE = "counter increments over 5 steps: eager minus replay"


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(8, 8)
        self.num_calls = 0

    def forward(self, x):
        self.num_calls += 1
        return self.proj(x)


def hazard():
    model = Model().to(DEV)
    x = torch.randn(4, 8, device=DEV)
    graph, _ = capture(lambda: model(x))
    before = model.num_calls
    replay(graph, 5)
    replayed = model.num_calls - before
    phase("eager")
    for _ in range(5):
        model(x)
    eager = model.num_calls - before - replayed
    return float(eager - replayed)
