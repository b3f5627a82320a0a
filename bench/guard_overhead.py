"""Replay-loop overhead of the replay guards on a 24-layer decoder step (GPU, run by hand).

    python bench/guard_overhead.py [--layers 24] [--dim 1024] [--steps 500] [--repeats 5]

One decode step (pre-norm attention over a static KV cache, MLP, dropout in eval mode) is
captured twice: once bare, once under the verifier's patches, which collect the guards. The
replay loop (copy the next token's embedding into the static input, replay) is timed:

- bare: the bare graph's replay();
- guards: the instrumented graph replayed through the unpatched replay(), plus its
  GuardSet.check() before each replay, as the patched replay() does (the overhead asked
  for: target at most 5% over bare);
- verifier replay: the patched replay() itself (guards and the liveness check of the
  captured tensors, for reference).

Each loop runs twice: asynchronous (the host runs ahead of the GPU) and synchronised after
every step (a decode loop that reads the sampled token back, where host time adds up).
Prints a Markdown table and the number of guards and the host cost of one check.
"""
from __future__ import annotations

import argparse
import math
import statistics
import time

import torch
import torch.nn as nn


class Attention(nn.Module):
    def __init__(self, dim: int, heads: int, cache_len: int):
        super().__init__()
        self.heads, self.head_dim = heads, dim // heads
        self.scale = 1.0 / math.sqrt(self.head_dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.out = nn.Linear(dim, dim)
        self.register_buffer("k_cache", torch.randn(1, heads, cache_len, dim // heads))
        self.register_buffer("v_cache", torch.randn(1, heads, cache_len, dim // heads))

    def forward(self, x):
        b = x.shape[0]
        q, k, v = self.qkv(x).view(b, 3, self.heads, self.head_dim).unbind(1)
        keys = torch.cat([self.k_cache.expand(b, -1, -1, -1), k.unsqueeze(2)], dim=2)
        values = torch.cat([self.v_cache.expand(b, -1, -1, -1), v.unsqueeze(2)], dim=2)
        att = torch.softmax(torch.einsum("bhd,bhld->bhl", q, keys) * self.scale, dim=-1)
        return self.out(torch.einsum("bhl,bhld->bhd", att, values).reshape(b, -1))


class Layer(nn.Module):
    def __init__(self, dim: int, heads: int, cache_len: int):
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.attn = Attention(dim, heads, cache_len)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))
        self.drop = nn.Dropout(0.1)

    def forward(self, x):
        x = x + self.drop(self.attn(self.norm1(x)))
        return x + self.drop(self.mlp(self.norm2(x)))


class Decoder(nn.Module):
    def __init__(self, layers: int, dim: int, heads: int, cache_len: int, vocab: int):
        super().__init__()
        self.layers = nn.ModuleList(Layer(dim, heads, cache_len) for _ in range(layers))
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab)
        self.temperature = 0.8

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return torch.softmax(self.head(self.norm(x)) / self.temperature, dim=-1)


def capture(model: nn.Module, static_x: torch.Tensor) -> tuple[torch.cuda.CUDAGraph, torch.Tensor]:
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            model(static_x)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = model(static_x)
    torch.cuda.synchronize()
    return graph, out


def loop_ms(step, static_x, tokens, steps: int, repeats: int, sync: bool) -> float:
    """Median milliseconds per step of `steps` replays, over `repeats` runs."""
    for i in range(10):
        static_x.copy_(tokens[i % len(tokens)])
        step()
    torch.cuda.synchronize()
    runs = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for i in range(steps):
            static_x.copy_(tokens[i % len(tokens)])
            step()
            if sync:
                torch.cuda.synchronize()
        torch.cuda.synchronize()
        runs.append((time.perf_counter() - t0) * 1000 / steps)
    return statistics.median(runs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=24)
    parser.add_argument("--dim", type=int, default=1024)
    parser.add_argument("--heads", type=int, default=16)
    parser.add_argument("--cache", type=int, default=512)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--steps", type=int, default=500)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("needs a CUDA device")

    from cglint.verify.capture import patches
    from cglint.verify.findings import frames
    from cglint.verify.guards import watchers
    from cglint.verify.run import session as sessions
    from cglint.verify.findings.recorder import Recorder

    torch.manual_seed(0)
    model = Decoder(args.layers, args.dim, args.heads, args.cache, 32000).cuda().eval()
    static_x = torch.randn(args.batch, args.dim, device="cuda")
    tokens = [torch.randn(args.batch, args.dim, device="cuda") for _ in range(16)]

    with torch.no_grad():
        bare_graph, _ = capture(model, static_x)
        session = sessions.begin(True)
        patches.install(session)
        watchers.install()
        try:
            graph, _ = capture(model, static_x)
            held = graph._cglint_guards
            base_replay = super(torch.cuda.graphs.CUDAGraph, graph).replay  # past the patched replay()
            recorder = Recorder(phase="replay")
            frame = frames.current_user_frame(1)

            def guarded() -> None:
                held.check(recorder, frame)
                base_replay()

            rows = []
            for sync in (False, True):
                bare = loop_ms(bare_graph.replay, static_x, tokens, args.steps, args.repeats, sync)
                with_guards = loop_ms(guarded, static_x, tokens, args.steps, args.repeats, sync)
                patched = loop_ms(graph.replay, static_x, tokens, args.steps, args.repeats, sync)
                rows.append((sync, bare, with_guards, patched))
            n = 20000
            t0 = time.perf_counter()
            for _ in range(n):
                held.check(recorder, frame)
            check_us = (time.perf_counter() - t0) * 1e6 / n
        finally:
            watchers.uninstall()
            patches.uninstall()
            sessions.end()

    print(f"{args.layers}-layer decoder step, dim {args.dim}, batch {args.batch}, KV cache {args.cache}; "
          f"{torch.cuda.get_device_name()}, torch {torch.__version__}")
    print(f"guards: {len(held)} ({len(held.polled)} re-read, {len(held)- len(held.polled)} watched), "
          f"{len(held.bound)} parameters and buffers watched; one check: {check_us:.2f} us on the host; "
          f"findings during the run: {len(recorder.observations)}")
    print()
    print("| loop | bare ms/step | with guards ms/step | overhead | verifier replay ms/step | overhead |")
    print("|---|---|---|---|---|---|")
    for sync, bare, with_guards, patched in rows:
        name = "synchronised every step" if sync else "asynchronous"
        print(f"| {name} | {bare:.3f} | {with_guards:.3f} | {100 * (with_guards / bare - 1):+.1f}% | "
              f"{patched:.3f} | {100 * (patched / bare - 1):+.1f}% |")


if __name__ == "__main__":
    main()
