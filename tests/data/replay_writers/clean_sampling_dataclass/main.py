import torch

from config import GenerationConfig, Request
from runner import DEVICE, GraphRunner
from scheduler import Scheduler

torch.manual_seed(0)
gen_config = GenerationConfig()
head = torch.nn.Linear(16, 32).to(DEVICE)
runner = GraphRunner(head, gen_config)
runner.capture()
scheduler = Scheduler(gen_config, [Request(i, t) for i, t in enumerate((1.0, 0.5, 2.0))])
same = True
while scheduler.waiting:
    scheduler.next_request()
    hidden = torch.randn(4, 16, device=DEVICE)
    same &= torch.allclose(runner.replay(hidden), runner.forward_eager(hidden), atol=1e-6)
print("VERDICT MATCHES" if same else "VERDICT DIVERGES")
