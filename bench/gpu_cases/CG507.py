"""CG507: A tqdm progress bar updated inside a captured function."""
# cglint: skip-file
from _harness import *

SEVERITY = "info"
OUTCOME = "diverged"  # output lines lost at replay, not values: info, but shown as a difference
MEASURE = "progress-bar steps over 5 calls: eager minus replay"


from tqdm import tqdm


def hazard():
    layers = [torch.nn.Linear(16, 16, device=DEV) for _ in range(3)]
    bar = tqdm(total=0, file=io.StringIO())
    x = torch.randn(8, 16, device=DEV)

    def run_layers():
        h = x
        for layer in layers:
            h = layer(h)
            bar.update(1)
        return h

    graph, _ = capture(run_layers)
    before = bar.n
    replay(graph, 5)
    replayed = bar.n - before
    phase("eager")
    for _ in range(5):
        run_layers()
    eager = bar.n - before - replayed
    return float(eager - replayed)
