"""Twin: the long-factor frequencies are copied into the registered `inv_freq` buffer in place.
The buffer registered at construction is the one the graph reads."""
import torch

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


class LongRopeRotaryEmbedding(torch.nn.Module):
    def __init__(self, dim, original_max, short_factor, long_factor):
        super().__init__()
        self.dim, self.original_max = dim, original_max
        self.short_factor, self.long_factor = short_factor, long_factor
        self.register_buffer("inv_freq", self._inv_freq(short_factor), persistent=False)
        self.original_inv_freq = self.inv_freq  # kept, as transformers does, to switch back

    def _inv_freq(self, factor):
        return 1.0 / (factor * 10000 ** (torch.arange(0, self.dim, 2, device=DEVICE).float() / self.dim))

    def update(self, seq_len):
        factor = self.long_factor if seq_len > self.original_max else self.short_factor
        self.inv_freq.copy_(self._inv_freq(factor))

    def forward(self, positions):
        freqs = positions[:, None].float() * self.inv_freq[None, :]
        return torch.cat([freqs.cos(), freqs.sin()], dim=-1)


rope = LongRopeRotaryEmbedding(8, original_max=4, short_factor=1.0, long_factor=4.0)
static_pos = torch.arange(4, device=DEVICE)
rope(static_pos)
graph = torch.cuda.CUDAGraph()
with torch.cuda.graph(graph):
    static_out = rope(static_pos)
same = True
for seq_len in (4, 6, 8):
    rope.update(seq_len)
    static_pos.copy_(torch.arange(seq_len - 4, seq_len, device=DEVICE))
    graph.replay()
    same &= torch.allclose(static_out, rope(static_pos))
print("VERDICT MATCHES" if same else "VERDICT DIVERGES")
