import torch


class KVWriter:
    def __init__(self, cache):
        self.cache = cache
        self.pos = 0

    def write(self, kv):
        self.cache[self.pos : self.pos + kv.shape[0]].copy_(kv)  # expect: CG702

    def advance(self, n):
        self.pos += n


cache = torch.zeros(128, 8, device="cuda")
kv = torch.randn(1, 8, device="cuda")
writer = KVWriter(cache)
writer.write(kv)
g = torch.cuda.CUDAGraph()
with torch.cuda.graph(g):
    writer.write(kv)
for _ in range(10):
    g.replay()
    writer.advance(1)
