"""Twin: the lr lives in a device tensor that the schedule fills in place; the float
assignment remains for groups whose lr is a number, and is not taken here."""
import torch


class WarmupSchedule:
    def __init__(self, optimizer, peak_lr, warmup_steps):
        self.optimizer = optimizer
        self.peak_lr = peak_lr
        self.warmup_steps = warmup_steps
        self.last_step = 0

    def lr_at(self, step):
        return self.peak_lr * min(1.0, (step + 1) / self.warmup_steps)

    def step(self):
        self.last_step += 1
        for group in self.optimizer.param_groups:
            if isinstance(group["lr"], torch.Tensor):
                group["lr"].fill_(self.lr_at(self.last_step))
            else:
                group["lr"] = self.lr_at(self.last_step)
