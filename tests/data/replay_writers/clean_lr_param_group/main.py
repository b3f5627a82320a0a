import torch

from optim import ForeachSGD
from schedule import WarmupSchedule

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def train(graphed):
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 1).to(DEVICE)
    opt = ForeachSGD(model.parameters(), lr=torch.tensor(0.0, device=DEVICE), weight_decay=0.01)
    sched = WarmupSchedule(opt, peak_lr=0.05, warmup_steps=4)
    sched.step()
    x, y = torch.randn(16, 8, device=DEVICE), torch.randn(16, device=DEVICE)

    def step():
        opt.zero_grad(set_to_none=False)
        loss = torch.nn.functional.mse_loss(model(x).squeeze(-1), y)
        loss.backward()
        opt.step()
        return loss

    step()  # warmup (allocates grads and momentum buffers)
    if graphed:
        # what the capture ran (it runs on the CPU stand-in) is undone: replays start from here
        saved = [t.detach().clone() for t in model.parameters()]
        saved += [opt.state[p]["momentum_buffer"].clone() for p in model.parameters()]
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            step()
        with torch.no_grad():
            live = list(model.parameters()) + [opt.state[p]["momentum_buffer"] for p in model.parameters()]
            for t, s in zip(live, saved):
                t.copy_(s)
    for _ in range(4):
        sched.step()
        graph.replay() if graphed else step()
    return [p.detach().clone() for p in model.parameters()]


same = all(torch.allclose(a, b, atol=1e-6) for a, b in zip(train(True), train(False)))
print("VERDICT MATCHES" if same else "VERDICT DIVERGES")
