import torch


class AugmentConfig:
    gain = 1.0


def augment(x):
    return x * AugmentConfig.gain  # expect: CG601


static_x = torch.randn(16, device="cuda")
s = torch.cuda.Stream()
s.wait_stream(torch.cuda.current_stream())
with torch.cuda.stream(s):
    augment(static_x)
torch.cuda.current_stream().wait_stream(s)
g = torch.cuda.CUDAGraph()
with torch.cuda.graph(g):
    static_y = augment(static_x)

matches = True
for gain in (0.5, 2.0):
    AugmentConfig.gain = gain
    g.replay()
    matches &= torch.allclose(static_y, augment(static_x))
print("VERDICT MATCHES" if matches else "VERDICT DIVERGES")
