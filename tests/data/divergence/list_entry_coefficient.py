import torch


class Mixer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.coefs = [1.0, 0.5]

    def forward(self, a, b):
        mixed = a * self.coefs[0]  # expect: CG601
        return mixed + b * self.coefs[1]


mixer = Mixer()
static_a = torch.randn(16, device="cuda")
static_b = torch.randn(16, device="cuda")
s = torch.cuda.Stream()
s.wait_stream(torch.cuda.current_stream())
with torch.cuda.stream(s):
    mixer(static_a, static_b)
torch.cuda.current_stream().wait_stream(s)
g = torch.cuda.CUDAGraph()
with torch.cuda.graph(g):
    static_y = mixer(static_a, static_b)

matches = True
for c in (0.1, 0.2):
    mixer.coefs[0] = c
    g.replay()
    matches &= torch.allclose(static_y, mixer(static_a, static_b))
print("VERDICT MATCHES" if matches else "VERDICT DIVERGES")
