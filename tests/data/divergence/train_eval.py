import torch
import torch.nn as nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(32, 32)
        self.drop = nn.Dropout(0.1)

    def forward(self, x):
        h = self.fc(x)
        if self.training:  # expect: CG202
            h = self.drop(h)
        return h


net = Net().cuda()
x = torch.randn(8, 32, device="cuda")
s = torch.cuda.Stream()
with torch.cuda.stream(s):
    net(x)
torch.cuda.current_stream().wait_stream(s)
g = torch.cuda.CUDAGraph()
with torch.cuda.graph(g):
    y = net(x)
net.eval()
for _ in range(3):
    g.replay()
