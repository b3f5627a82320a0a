import copy

import torch
import torch.nn as nn
import torch.nn.functional as F


class ModelEMA:
    def __init__(self, model, max_decay=0.9999):
        self.params = [p for p in model.parameters()]
        self.shadow = [p.detach().clone() for p in self.params]
        self.max_decay = max_decay
        self.num_updates = 0
        self.decay = 0.0

    def tick(self):
        self.num_updates += 1
        self.decay = min(self.max_decay, (1 + self.num_updates) / (10 + self.num_updates))

    @torch.no_grad()
    def update(self):
        for s, p in zip(self.shadow, self.params):
            s.mul_(self.decay).add_(p, alpha=1.0 - self.decay)  # expect: CG601


class ConvNet(nn.Module):
    def __init__(self, channels=8, n_classes=5):
        super().__init__()
        self.conv1 = nn.Conv1d(1, channels, 5, padding=2)
        self.conv2 = nn.Conv1d(channels, channels, 5, padding=2)
        self.fc = nn.Linear(channels, n_classes)

    def forward(self, x):
        x = F.relu(self.conv1(x))
        x = F.relu(self.conv2(x))
        return self.fc(x.mean(dim=-1))


def training_step(model, ema, x, y, lr=0.2):
    loss = F.cross_entropy(model(x), y)
    grads = torch.autograd.grad(loss, ema.params)
    with torch.no_grad():
        for p, g in zip(ema.params, grads):
            p.add_(g, alpha=-lr)
    ema.update()
    return loss.detach()


def main():
    torch.manual_seed(0)
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cudnn.benchmark = False
    torch.backends.cudnn.deterministic = True

    model = ConvNet().cuda()
    ema = ModelEMA(model)
    ema.tick()

    data = torch.randn(16, 32, 1, 40, device="cuda")
    labels = torch.randint(0, 5, (16, 32), device="cuda")
    static_x, static_y = data[0].clone(), labels[0].clone()

    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            training_step(model, ema, static_x, static_y)
    torch.cuda.current_stream().wait_stream(s)

    ref_model = copy.deepcopy(model)
    ref_ema = ModelEMA(ref_model)
    ref_ema.shadow = [t.clone() for t in ema.shadow]
    ref_ema.num_updates = ema.num_updates
    ref_ema.decay = ema.decay

    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        static_loss = training_step(model, ema, static_x, static_y)

    for step in range(1, 16):
        ema.tick()
        static_x.copy_(data[step])
        static_y.copy_(labels[step])
        g.replay()

        ref_ema.tick()
        training_step(ref_model, ref_ema, data[step], labels[step])

    torch.cuda.synchronize()
    ok = all(
        torch.allclose(a, b, rtol=1e-4, atol=1e-5) for a, b in zip(ema.shadow, ref_ema.shadow)
    )
    print("VERDICT MATCHES" if ok else "VERDICT DIVERGES")


if __name__ == "__main__":
    main()
