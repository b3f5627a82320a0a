import torch


class Head(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(16, 16)
        self.temperature = 1.0

    def forward(self, x):
        return torch.softmax(self.proj(x) / self.temperature, -1)  # expect: CG601


head = Head().cuda()
static_x = torch.randn(4, 16, device="cuda")
with torch.no_grad():
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        head(static_x)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        static_y = head(static_x)
    matches = True
    for value in (0.5, 2.0):
        setattr(head, "temperature", value)
        g.replay()
        matches &= torch.allclose(static_y, head(static_x))
print("VERDICT MATCHES" if matches else "VERDICT DIVERGES")
