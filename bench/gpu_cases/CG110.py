"""CG110: GradScaler `step()` and `update()` inside capture."""
# cglint: skip-file
from _harness import *

SEVERITY = "error"


def hazard():
    model = torch.nn.Linear(16, 16, device=DEV)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cuda")
    x = torch.randn(8, 16, device=DEV)

    def step():
        loss = model(x).float().pow(2).mean()
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()

    capture(step)
