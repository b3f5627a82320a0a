"""CG602: A cosine LR schedule stepped between replays of a captured AdamW step with a float lr."""
# cglint: skip-file
from _harness import *

SEVERITY = "warning"
MEASURE = "max abs weight difference after 5 steps, graphed versus eager; control: the same without the schedule"


def run(schedule):
    torch.manual_seed(0)
    x, y = torch.randn(32, 16, device=DEV), torch.randn(32, 16, device=DEV)
    graphed = torch.nn.Linear(16, 16, device=DEV)
    eager = copy.deepcopy(graphed)
    opts = [torch.optim.AdamW(m.parameters(), lr=1e-2, capturable=True) for m in (graphed, eager)]
    scheds = [torch.optim.lr_scheduler.StepLR(o, step_size=1, gamma=0.5) for o in opts]

    def step(model, opt):
        ((model(x) - y) ** 2).mean().backward()
        opt.step()

    def warm():
        opts[0].zero_grad(set_to_none=True)
        step(graphed, opts[0])

    side_warmup(warm)
    opts[0].zero_grad(set_to_none=True)
    graph, _ = capture(lambda: step(graphed, opts[0]), warmup=False)
    phase("eager")
    for _ in range(3):
        opts[1].zero_grad(set_to_none=True)
        step(eager, opts[1])
    for _ in range(5):
        replay(graph)
        phase("eager")
        opts[1].zero_grad(set_to_none=True)
        step(eager, opts[1])
        if schedule:
            for s in scheds:
                s.step()
    return maxdiff(graphed.weight, eager.weight)


def hazard():
    return {"divergence": run(schedule=True), "control": run(schedule=False)}
