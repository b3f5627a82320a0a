"""CG502: A logger call inside a captured training step."""
# cglint: skip-file
from _harness import *

SEVERITY = "info"
OUTCOME = "diverged"  # output lines lost at replay, not values: info, but shown as a difference
MEASURE = "log records over 5 steps: eager minus replay"


import logging


class Count(logging.Handler):
    records = 0

    def emit(self, record):
        Count.records += 1


def hazard():
    log = logging.getLogger("case")
    log.addHandler(Count())
    log.setLevel(logging.INFO)
    log.propagate = False
    model = torch.nn.Linear(16, 16, device=DEV)
    x, y = torch.randn(8, 16, device=DEV), torch.randn(8, 16, device=DEV)

    def train_step():
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        log.info("step done")
        return loss

    graph, _ = capture(train_step)
    before = Count.records
    replay(graph, 5)
    replayed = Count.records - before
    phase("eager")
    for _ in range(5):
        train_step()
    eager = Count.records - before - replayed
    return float(eager - replayed)
