"""A capturable momentum SGD over foreach kernels (as Megatron's and apex's fused optimizers):
the update reads the param group's lr as a Python float."""
import torch


class ForeachSGD(torch.optim.Optimizer):
    def __init__(self, params, lr=0.1, momentum=0.9, weight_decay=0.0):
        super().__init__(params, dict(lr=lr, momentum=momentum, weight_decay=weight_decay))

    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            params = [p for p in group["params"] if p.grad is not None]
            grads = [p.grad for p in params]
            bufs = [self.state[p].setdefault("momentum_buffer", torch.zeros_like(p)) for p in params]
            if group["weight_decay"] != 0:
                grads = torch._foreach_add(grads, params, alpha=group["weight_decay"])
            torch._foreach_mul_(bufs, group["momentum"])
            torch._foreach_add_(bufs, grads)
            self._update(params, bufs, group)

    def _update(self, params, bufs, group):
        lr = group["lr"]  # read
        if isinstance(lr, torch.Tensor):
            torch._foreach_add_(params, torch._foreach_mul(bufs, -lr))
        else:
            torch._foreach_add_(params, bufs, alpha=-lr)
