"""CG504: `self.history.append(...)` in a captured module's forward."""
# cglint: skip-file
from _harness import *

SEVERITY = "warning"
MEASURE = "entries appended over 5 steps: eager minus replay"


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(8, 8)
        self.history = []

    def forward(self, x):
        y = self.proj(x)
        self.history.append(y.detach())
        return y


def hazard():
    model = Model().to(DEV)
    x = torch.randn(4, 8, device=DEV)
    graph, _ = capture(lambda: model(x))
    before = len(model.history)
    replay(graph, 5)
    replayed = len(model.history) - before
    phase("eager")
    for _ in range(5):
        model(x)
    eager = len(model.history) - before - replayed
    return float(eager - replayed)
