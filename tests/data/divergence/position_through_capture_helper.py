import math

import torch
import torch.nn as nn


class CachedSelfAttention(nn.Module):
    def __init__(self, dim, max_len):
        super().__init__()
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.pos_emb = nn.Embedding(max_len, dim)
        self.dim = dim

    def forward(self, x, k_cache, v_cache, pos):
        positions = torch.arange(pos, pos + 1, device=x.device)
        h = x + self.pos_emb(positions)
        q, k, v = self.qkv(h).chunk(3, dim=-1)
        k_cache[:, pos] = k
        v_cache[:, pos] = v
        keys = k_cache[:, : pos + 1]
        values = v_cache[:, : pos + 1]
        scores = torch.einsum("bd,btd->bt", q, keys) / math.sqrt(self.dim)
        ctx = torch.einsum("bt,btd->bd", scores.softmax(dim=-1), values)
        return self.proj(ctx)


class DecoderState:
    def __init__(self, attn, batch, max_len):
        self.attn = attn
        self.pos = 0
        self.k_cache = torch.zeros(batch, max_len, attn.dim, device="cuda")
        self.v_cache = torch.zeros(batch, max_len, attn.dim, device="cuda")

    def decode_one(self, x):
        return self.attn(x, self.k_cache, self.v_cache, self.pos)  # expect: CG601


def capture_decode(state, static_x):
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            state.decode_one(static_x)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_out = state.decode_one(static_x)
    return graph, static_out


@torch.no_grad()
def main():
    torch.manual_seed(0)
    batch, dim, max_len, steps = 2, 64, 32, 10
    attn = CachedSelfAttention(dim, max_len).cuda().eval()

    graphed = DecoderState(attn, batch, max_len)
    reference = DecoderState(attn, batch, max_len)

    static_x = torch.zeros(batch, dim, device="cuda")
    graph, static_out = capture_decode(graphed, static_x)

    x = torch.randn(batch, dim, device="cuda")
    mismatched_steps = 0
    for _ in range(steps):
        static_x.copy_(x)
        graph.replay()
        out = static_out.clone()
        graphed.pos += 1

        ref_out = reference.decode_one(x)
        reference.pos += 1

        if not torch.allclose(out, ref_out, rtol=1e-4, atol=1e-5):
            mismatched_steps += 1
        x = torch.tanh(ref_out)

    torch.cuda.synchronize()
    print("VERDICT MATCHES" if mismatched_steps == 0 else "VERDICT DIVERGES")


if __name__ == "__main__":
    main()
