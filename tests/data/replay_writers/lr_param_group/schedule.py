"""Linear warmup then constant (as transformers' get_linear_schedule_with_warmup, applied by hand)."""


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
            group["lr"] = self.lr_at(self.last_step)  # write
