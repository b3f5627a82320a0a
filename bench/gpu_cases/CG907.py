"""CG907: make_graphed_callables of a DDP model built on the default stream, 3 warmup iterations (NCCL, world size 1)."""
# cglint: skip-file
from _harness import *

SEVERITY = "error"


import socket

import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel


def hazard():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("nccl", rank=0, world_size=1, device_id=torch.device(DEV, 0))
    torch.manual_seed(0)
    model = DistributedDataParallel(torch.nn.Linear(16, 16, device=DEV))
    twin = copy.deepcopy(model.module)
    sample = torch.randn(8, 16, device=DEV, requires_grad=True)
    phase("capture")
    graphed = torch.cuda.make_graphed_callables(model, (sample,))
    phase("replay")
    x = torch.randn(8, 16, device=DEV, requires_grad=True)
    graphed(x).sum().backward()
    torch.cuda.synchronize()
    phase("eager")
    twin.zero_grad(set_to_none=True)
    twin(x).sum().backward()
    d = maxdiff(model.module.weight.grad, twin.weight.grad)
    dist.destroy_process_group()
    return {"divergence": d, "note": "graphed and replayed"}
