"""Prefill runs the model eagerly, decode replays its graph (flash-attn's and mamba's
generation loops). The attention forward converts its own slopes once
(`self.alibi_slopes = self.alibi_slopes.to(torch.float32)`): the eager prefill runs that
write between replays, but it is the captured code's own write, the same at capture and on
every call, not a change made between replays."""
import torch
import torch.nn as nn


class SelfAttention(nn.Module):
    def __init__(self, dim, heads, alibi_slopes=None):
        super().__init__()
        self.qkv = nn.Linear(dim, 3 * dim)
        self.heads = heads
        self.alibi_slopes = alibi_slopes

    def forward(self, x):
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        scores = q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5
        if self.alibi_slopes is not None:
            self.alibi_slopes = self.alibi_slopes.to(torch.float32)
            scores = scores + self.alibi_slopes.mean()
        return scores.softmax(-1) @ v


class LM(nn.Module):
    def __init__(self, dim=32, layers=2):
        super().__init__()
        slopes = torch.linspace(0.1, 1.0, 4, device="cuda", dtype=torch.float16)
        self.layers = nn.ModuleList(SelfAttention(dim, 4, slopes) for _ in range(layers))

    def forward(self, x):
        for layer in self.layers:
            x = x + layer(x)
        return x


def capture_decode(model, static_x):
    model(static_x)  # warm-up
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_out = model(static_x)
    return graph, static_out


def generate(model, prompts, steps=4):
    static_x = torch.zeros(2, 1, 32, device="cuda")
    graph, static_out = capture_decode(model, static_x)
    outputs = []
    for prompt in prompts:
        hidden = model(prompt)  # prefill, eager
        static_x.copy_(hidden[:, -1:])
        for _ in range(steps):
            graph.replay()
            static_x.copy_(static_out)
        outputs.append(static_out.clone())
    return outputs


if __name__ == "__main__":
    lm = LM().cuda()
    generate(lm, [torch.randn(2, 5, 32, device="cuda") for _ in range(2)])
