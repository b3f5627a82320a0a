"""Twin: the write position lives in a device tensor (index_copy_ and a mask over the whole
cache); the host `state.pos` still advances and the captured code still branches on
`state.pos == 0`, whose outcome is the same at capture and at every decode replay."""
import torch

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


class DecodeState:
    def __init__(self, max_len):
        self.max_len = max_len
        self.pos = 0
        self.pos_t = torch.zeros(1, dtype=torch.long, device=DEVICE)


class CachedAttention(torch.nn.Module):
    def __init__(self, dim, max_len):
        super().__init__()
        self.qkv = torch.nn.Linear(dim, 3 * dim)
        self.register_buffer("k_cache", torch.zeros(1, max_len, dim))
        self.register_buffer("v_cache", torch.zeros(1, max_len, dim))
        self.register_buffer("positions", torch.arange(max_len))

    def forward(self, x, state):
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        if state.pos == 0:  # prefill: nothing cached yet
            return torch.softmax(q @ k.transpose(1, 2), dim=-1) @ v
        self.k_cache.index_copy_(1, state.pos_t, k)
        self.v_cache.index_copy_(1, state.pos_t, v)
        scores = (q @ self.k_cache.transpose(1, 2)).masked_fill(self.positions > state.pos_t, float("-inf"))
        return torch.softmax(scores, dim=-1) @ self.v_cache


def generate(graphed):
    torch.manual_seed(0)
    attn = CachedAttention(8, 16).to(DEVICE)
    state = DecodeState(16)
    x = torch.randn(1, 1, 8, device=DEVICE)
    attn(x, state)
    state.pos = 1
    state.pos_t.fill_(1)
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
        state.pos += 1
        state.pos_t.fill_(state.pos)
    return outs


same = all(torch.allclose(a, b, atol=1e-6) for a, b in zip(generate(True), generate(False)))
print("VERDICT MATCHES" if same else "VERDICT DIVERGES")
