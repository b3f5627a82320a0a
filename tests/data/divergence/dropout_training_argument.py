import torch
import torch.nn as nn
import torch.nn.functional as F


class MLPClassifier(nn.Module):
    def __init__(self, in_dim=32, hidden=256, n_classes=10, p_drop=0.5):
        super().__init__()
        self.fc1 = nn.Linear(in_dim, hidden)
        self.fc2 = nn.Linear(hidden, hidden)
        self.head = nn.Linear(hidden, n_classes)
        self.p_drop = p_drop

    def forward(self, x):
        h = F.relu(self.fc1(x))
        h = F.dropout(h, p=self.p_drop, training=self.training)  # expect: CG601
        h = F.relu(self.fc2(h))
        return self.head(h)


class GraphedForward:
    """Runs the model's forward pass through a captured CUDA graph."""

    def __init__(self, model, example):
        self.model = model
        self.static_in = example.clone()
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s), torch.no_grad():
            for _ in range(3):
                self.model(self.static_in)
        torch.cuda.current_stream().wait_stream(s)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph), torch.no_grad():
            self.static_out = self.model(self.static_in)

    def __call__(self, x):
        self.static_in.copy_(x)
        self.graph.replay()
        return self.static_out.clone()


def train_a_little(model, data, targets, steps=20):
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    for i in range(steps):
        loss = F.cross_entropy(model(data[i % len(data)]), targets[i % len(targets)])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()


def main():
    torch.manual_seed(0)
    model = MLPClassifier().cuda()
    data = torch.randn(4, 64, 32, device="cuda")
    targets = torch.randint(0, 10, (4, 64), device="cuda")
    train_a_little(model, data, targets)

    fast_forward = GraphedForward(model, data[0])

    model.eval()
    val_x = torch.randn(3, 64, 32, device="cuda")
    matches = []
    for xb in val_x:
        logits = fast_forward(xb)
        with torch.no_grad():
            expected = model(xb)
        matches.append(torch.allclose(logits, expected, rtol=1e-4, atol=1e-4))
    model.train()

    torch.cuda.synchronize()
    print("VERDICT MATCHES" if all(matches) else "VERDICT DIVERGES")


if __name__ == "__main__":
    main()
