"""gpt-fast style decoding with a static KV cache whose write position is a Python int on a
state object: the captured attention slices the cache with it, the decode loop advances it."""
import torch

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


class DecodeState:
    def __init__(self, max_len):
        self.max_len = max_len
        self.pos = 0


class CachedAttention(torch.nn.Module):
    def __init__(self, dim, max_len):
        super().__init__()
        self.qkv = torch.nn.Linear(dim, 3 * dim)
        self.register_buffer("k_cache", torch.zeros(1, max_len, dim))
        self.register_buffer("v_cache", torch.zeros(1, max_len, dim))

    def forward(self, x, state):
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        if state.pos == 0:  # prefill: nothing cached yet
            return torch.softmax(q @ k.transpose(1, 2), dim=-1) @ v
        start = state.pos  # read
        self.k_cache[:, start:start + 1] = k
        self.v_cache[:, start:start + 1] = v
        keys, values = self.k_cache[:, :start + 1], self.v_cache[:, :start + 1]
        return torch.softmax(q @ keys.transpose(1, 2), dim=-1) @ values


def generate(graphed):
    torch.manual_seed(0)
    attn = CachedAttention(8, 16).to(DEVICE)
    state = DecodeState(16)
    x = torch.randn(1, 1, 8, device=DEVICE)
    attn(x, state)
    state.pos = 1
    static_x = x.clone()
    if graphed:
        attn(static_x, state)  # warmup
        attn.k_cache.zero_(), attn.v_cache.zero_()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            static_out = attn(static_x, state)
        attn.k_cache.zero_(), attn.v_cache.zero_()
    outs = []
    for step in range(4):
        static_x.copy_(torch.randn(1, 1, 8, device=DEVICE))
        if graphed:
            graph.replay()
            outs.append(static_out.clone())
        else:
            outs.append(attn(static_x, state))
        state.pos += 1  # write
    return outs


same = all(torch.allclose(a, b, atol=1e-6) for a, b in zip(generate(True), generate(False)))
print("VERDICT MATCHES" if same else "VERDICT DIVERGES")
