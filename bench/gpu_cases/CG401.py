"""CG401: Rebinding the static input instead of `copy_()` before replay."""
# cglint: skip-file
from _harness import *

SEVERITY = "warning"
MEASURE = "max abs difference between the replay output and eager on the new batch"


def hazard():
    model = torch.nn.Linear(16, 16, device=DEV)
    holder = {"x": torch.zeros(8, 16, device=DEV)}
    static_x = holder["x"]  # kept alive, as the script's own name keeps it
    graph, static_y = capture(lambda: model(holder["x"]))
    batch = torch.randn(8, 16, device=DEV)
    holder["x"] = batch  # static_x = batch
    replay(graph)
    phase("eager")
    return maxdiff(static_y, model(batch))
