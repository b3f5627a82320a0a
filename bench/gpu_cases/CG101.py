"""CG101: `loss.item()` at the end of a captured training step."""
# cglint: skip-file
from _harness import *

SEVERITY = "error"


def hazard():
    model = torch.nn.Linear(16, 16, device=DEV)
    x, y = torch.randn(8, 16, device=DEV), torch.randn(8, 16, device=DEV)

    def train_step():
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        return loss.item()

    capture(train_step)
