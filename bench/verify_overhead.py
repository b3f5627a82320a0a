"""Capture and replay overhead of the verifier's instrumentation on a serving engine's graphs.

    python bench/verify_overhead.py [--layers 24] [--dim 1024] [--rounds 3] [--breakdown]
    python bench/verify_overhead.py --cpu-proxy [--dim 64] [--breakdown]

The workload is what a serving engine captures at start-up: the decode step of a 24-layer
decoder (embedding, pre-norm attention over a KV cache written in place at each sequence's
position, SwiGLU MLP, LM head, bf16), captured once per batch size for 8 batch sizes
(largest first) sharing one memory pool (`pool=torch.cuda.graph_pool_handle()`), each after
two eager warm-up steps on a side stream.

Rounds alternate: bare (plain torch) and instrumented (the verifier installed in the
process exactly as `cglint verify SCRIPT` and `pytest --cglint-verify` install it: the
capture patches, sync hooks and replay guards, with a listener that serialises the run's
state on every change as the supervised child does). Times, medians over the rounds:

- captures: the `with torch.cuda.graph(...)` blocks only (target: instrumented at most 2x bare);
- start-up: warm-ups and captures of all 8 batch sizes, as an engine's start-up sees it;
- replay: a decode loop over the batch sizes (copy the next tokens into the static input,
  replay), asynchronous and synchronised every step, through the patched replay() of the
  instrumented graphs against the bare graphs' unpatched replay.

`--cpu-proxy` runs no GPU: the decode step at a small width on the CPU, inside the same
CaptureMonitor a GPU capture gets (without sync debug mode), against the same step bare.
Host-side cost only: it is for profiling the instrumentation, not a figure to report.

`--breakdown` also times the instrumented captures with one part of the instrumentation off at
a time (the torch hooks, the host tracer, the replay-guard collector). A profiler cannot be used
instead: the host tracer is itself the thread's profile function.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import math
import statistics
import time
from typing import Any, Callable

import torch
import torch.nn as nn
import torch.nn.functional as F

BATCH_SIZES = (64, 48, 32, 24, 16, 8, 4, 1)  # captured largest first, as engines do (the pool is reused)


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class Attention(nn.Module):
    def __init__(self, dim: int, heads: int, max_batch: int, max_len: int):
        super().__init__()
        self.heads, self.head_dim = heads, dim // heads
        self.scale = 1.0 / math.sqrt(self.head_dim)
        self.qkv = nn.Linear(dim, 3 * dim, bias=False)
        self.out = nn.Linear(dim, dim, bias=False)
        self.register_buffer("k_cache", torch.zeros(max_batch, heads, max_len, self.head_dim), persistent=False)
        self.register_buffer("v_cache", torch.zeros(max_batch, heads, max_len, self.head_dim), persistent=False)

    def forward(self, x, positions, mask):
        b = x.shape[0]
        q, k, v = self.qkv(x).view(b, 3, self.heads, self.head_dim).unbind(1)
        index = positions.view(b, 1, 1, 1).expand(b, self.heads, 1, self.head_dim)
        keys = self.k_cache[:b].scatter_(2, index, k.unsqueeze(2))
        values = self.v_cache[:b].scatter_(2, index, v.unsqueeze(2))
        scores = torch.einsum("bhd,bhld->bhl", q, keys) * self.scale
        att = torch.softmax(scores.masked_fill(mask, float("-inf")), dim=-1)
        return self.out(torch.einsum("bhl,bhld->bhd", att, values).reshape(b, -1))


class MLP(nn.Module):
    def __init__(self, dim: int, hidden: int):
        super().__init__()
        self.gate_up = nn.Linear(dim, 2 * hidden, bias=False)
        self.down = nn.Linear(hidden, dim, bias=False)

    def forward(self, x):
        gate, up = self.gate_up(x).chunk(2, dim=-1)
        return self.down(F.silu(gate) * up)


class Block(nn.Module):
    def __init__(self, dim: int, heads: int, max_batch: int, max_len: int):
        super().__init__()
        self.attn_norm, self.mlp_norm = RMSNorm(dim), RMSNorm(dim)
        self.attn = Attention(dim, heads, max_batch, max_len)
        self.mlp = MLP(dim, 4 * dim)

    def forward(self, x, positions, mask):
        x = x + self.attn(self.attn_norm(x), positions, mask)
        return x + self.mlp(self.mlp_norm(x))


class Decoder(nn.Module):
    def __init__(self, layers: int, dim: int, heads: int, vocab: int, max_batch: int, max_len: int):
        super().__init__()
        self.max_len = max_len
        self.embed = nn.Embedding(vocab, dim)
        self.blocks = nn.ModuleList(Block(dim, heads, max_batch, max_len) for _ in range(layers))
        self.norm = RMSNorm(dim)
        self.lm_head = nn.Linear(dim, vocab, bias=False)

    def decode_step(self, tokens, positions):
        """One new token per sequence: logits of the next one."""
        x = self.embed(tokens)
        steps = torch.arange(self.max_len, device=tokens.device)
        mask = (steps.view(1, -1) > positions.view(-1, 1)).unsqueeze(1)
        for block in self.blocks:
            x = block(x, positions, mask)
        return self.lm_head(self.norm(x)).float()


class Engine:
    """Static inputs and one graph per batch size, captured into one shared pool."""

    def __init__(self, model: Decoder, vocab: int, device: str):
        self.model, self.vocab, self.device = model, vocab, device
        self.tokens = torch.zeros(max(BATCH_SIZES), dtype=torch.long, device=device)
        self.positions = torch.zeros(max(BATCH_SIZES), dtype=torch.long, device=device)
        self.graphs: dict[int, Any] = {}
        self.outputs: dict[int, torch.Tensor] = {}

    def warm_up(self, b: int) -> None:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(2):
                self.model.decode_step(self.tokens[:b], self.positions[:b])
        torch.cuda.current_stream().wait_stream(side)

    def capture_all(self) -> tuple[float, float]:
        """(seconds in the capture blocks, seconds for the whole start-up)."""
        pool = torch.cuda.graph_pool_handle()
        in_captures = 0.0
        start = time.perf_counter()
        for b in BATCH_SIZES:
            self.warm_up(b)
            torch.cuda.synchronize()
            graph = torch.cuda.CUDAGraph()
            t0 = time.perf_counter()
            with torch.cuda.graph(graph, pool=pool):
                self.outputs[b] = self.model.decode_step(self.tokens[:b], self.positions[:b])
            torch.cuda.synchronize()
            in_captures += time.perf_counter() - t0
            self.graphs[b] = graph
        return in_captures, time.perf_counter() - start

    def release(self) -> None:
        for graph in self.graphs.values():
            graph.reset()
        self.graphs.clear()
        self.outputs.clear()
        torch.cuda.synchronize()
        torch.cuda.empty_cache()


def build(layers: int, dim: int, device: str, dtype: torch.dtype, max_len: int, vocab: int) -> Decoder:
    torch.manual_seed(0)
    model = Decoder(layers, dim, max(dim // 64, 1), vocab, max(BATCH_SIZES), max_len)
    return model.to(device=device, dtype=dtype).eval()


def replay_ms(engine: Engine, replay: Callable[[Any], None], steps: int, sync: bool) -> float:
    """Milliseconds per decode step, the batch size cycling through the captured ones."""
    order = [BATCH_SIZES[i % len(BATCH_SIZES)] for i in range(steps)]
    new_tokens = torch.randint(0, engine.vocab, (len(BATCH_SIZES), max(BATCH_SIZES)), device=engine.device)

    def run(n: int) -> None:
        for i in range(n):
            b = order[i % len(order)]
            engine.tokens[:b].copy_(new_tokens[i % len(BATCH_SIZES), :b])
            engine.positions[:b].add_(1).remainder_(engine.model.max_len)
            replay(engine.graphs[b])
            if sync:
                torch.cuda.synchronize()
        torch.cuda.synchronize()

    run(len(BATCH_SIZES))
    t0 = time.perf_counter()
    run(steps)
    return (time.perf_counter() - t0) * 1000 / steps


class Instrumented:
    """The verifier installed in this process as a supervised `cglint verify` child installs it."""

    def __enter__(self) -> Any:
        from cglint.verify import backend
        from cglint.verify.run import script
        from cglint.verify.run import session as sessions

        self.backend = backend.select(True)
        self.published = 0

        def publish(current: Any) -> None:  # the child writes this to its event stream on every change
            json.dumps(script.state(current, "gpu"), default=str)
            self.published += 1

        self.session = sessions.begin(True, listener=publish)
        self.backend.install(self.session)
        return self.session

    def __exit__(self, *exc: object) -> None:
        from cglint.verify.run import session as sessions

        self.backend.uninstall()
        sessions.end()


PARTS = (("all", {}), ("without the torch-call hooks (call wrappers)", {"api_mode": False}),
         ("without the host tracer", {"host": False}), ("without the guard collector", {"guard_reads": False}),
         ("none (capture patches only)", {"api_mode": False, "host": False, "guard_reads": False}))


@contextlib.contextmanager
def without(off: dict[str, bool]):
    """Captures instrumented with some parts of the instrumentation switched off (for --breakdown)."""
    from cglint.verify.capture import instrument

    original = instrument.Instrumentation.__init__

    def init(self, *args, **kwargs):
        original(self, *args, **kwargs)
        if "host" in off:
            self._host = None
        if "api_mode" in off:
            self.api_mode = self.call_patches = False
        if "op_mode" in off:
            self.op_mode = False
        if "guard_reads" in off:
            self.guard_reads = False

    instrument.Instrumentation.__init__ = init
    try:
        yield
    finally:
        instrument.Instrumentation.__init__ = original


def gpu_main(args: argparse.Namespace) -> None:
    if not torch.cuda.is_available():
        raise SystemExit("needs a CUDA device (or --cpu-proxy)")
    model = build(args.layers, args.dim, "cuda", torch.bfloat16, args.max_len, args.vocab)
    bare_engine = Engine(model, args.vocab, "cuda")
    captures: dict[str, list[float]] = {"bare": [], "instrumented": []}
    startups: dict[str, list[float]] = {"bare": [], "instrumented": []}
    with torch.no_grad():
        bare_engine.capture_all()  # cuBLAS handles, allocator segments, lazy modules: not part of either figure
        bare_engine.release()
        for _ in range(args.rounds):
            for kind in ("bare", "instrumented"):
                engine = Engine(model, args.vocab, "cuda")
                if kind == "bare":
                    in_captures, startup = engine.capture_all()
                else:
                    with Instrumented() as session:
                        in_captures, startup = engine.capture_all()
                        findings = session.findings()
                        graphs = list(session.graphs)
                engine.release()
                captures[kind].append(in_captures * 1000)
                startups[kind].append(startup * 1000)

        # Replays: bare graphs through the unpatched replay, instrumented graphs through the patched one.
        bare_engine.capture_all()
        base_replay = torch._C._CUDAGraph.replay
        rows = []
        with Instrumented() as session:
            engine = Engine(model, args.vocab, "cuda")
            engine.capture_all()
            for sync in (False, True):
                bare = statistics.median(replay_ms(bare_engine, base_replay, args.steps, sync) for _ in range(args.repeats))
                patched = statistics.median(replay_ms(engine, lambda g: g.replay(), args.steps, sync)
                                            for _ in range(args.repeats))
                rows.append((sync, bare, patched))
            replay_findings = session.findings()
            guards = sum(len(getattr(g, "_cglint_guards", None) or ()) for g in engine.graphs.values())
        engine.release()
        bare_engine.release()

    cap = {k: statistics.median(v) for k, v in captures.items()}
    start = {k: statistics.median(v) for k, v in startups.items()}
    print(f"{args.layers}-layer decoder decode step, dim {args.dim}, bf16, KV cache {args.max_len}, "
          f"batch sizes {', '.join(map(str, BATCH_SIZES))} in one pool; {torch.cuda.get_device_name()}, "
          f"torch {torch.__version__}; median of {args.rounds} rounds")
    print(f"instrumented captures: {len(graphs)} ({sum(g.ok for g in graphs)} ok), findings {len(findings)}; "
          f"replay guards {guards} over the 8 graphs, findings during replays {len(replay_findings)}")
    print()
    print("| measured | bare | instrumented | ratio |")
    print("|---|---|---|---|")
    print(f"| 8 captures (the `with torch.cuda.graph` blocks) | {cap['bare']:.1f} ms | {cap['instrumented']:.1f} ms | "
          f"{cap['instrumented'] / cap['bare']:.2f}x |")
    print(f"| start-up (warm-ups and captures) | {start['bare']:.1f} ms | {start['instrumented']:.1f} ms | "
          f"{start['instrumented'] / start['bare']:.2f}x |")
    for sync, bare, patched in rows:
        name = "replay loop, synchronised every step" if sync else "replay loop, asynchronous"
        print(f"| {name} | {bare:.3f} ms/step | {patched:.3f} ms/step | {100 * (patched / bare - 1):+.1f}% |")
    print(f"\nper round, ms: {json.dumps(captures)}")
    if args.breakdown:
        print("\n| instrumentation | 8 captures | ratio to bare |\n|---|---|---|")
        with torch.no_grad():
            for label, off in PARTS:
                times = []
                for _ in range(args.rounds):
                    engine = Engine(model, args.vocab, "cuda")
                    with without(off), Instrumented():
                        times.append(engine.capture_all()[0] * 1000)
                    engine.release()
                ms = statistics.median(times)
                print(f"| {label} | {ms:.1f} ms | {ms / cap['bare']:.2f}x |")


def cpu_proxy_main(args: argparse.Namespace) -> None:
    """Host-side cost of the instrumentation on the CPU (for profiling; see the module docstring)."""
    from cglint.verify.findings import frames
    from cglint.verify.capture.monitor import CaptureMonitor

    model = build(args.layers, args.dim, "cpu", torch.float32, 64, 512)
    tokens = torch.zeros(max(BATCH_SIZES), dtype=torch.long)
    positions = torch.zeros(max(BATCH_SIZES), dtype=torch.long)
    sizes = [max(1, b // 8) for b in BATCH_SIZES]  # small batches: the host's per-operator cost dominates

    def steps(instrument: bool) -> float:
        total = 0.0
        for b in sizes:
            monitor = CaptureMonitor(kind="torch.cuda.graph", sync_debug=False) if instrument else None
            t0 = time.thread_time()  # CPU time of this thread: other processes on the machine do not count
            if monitor:
                monitor.start()
            model.decode_step(tokens[:b], positions[:b])
            if monitor:
                monitor.stop()
            total += time.thread_time() - t0
        return total * 1000

    frames.refresh()
    torch.set_num_threads(1)  # a dispatch mode with many CPU threads waits on them at every operator
    with torch.no_grad():
        steps(False), steps(True)
        bare = min(steps(False) for _ in range(args.rounds))
        inst = min(steps(True) for _ in range(args.rounds))
        print(f"CPU proxy, {args.layers} layers, dim {args.dim}, {len(sizes)} steps: bare {bare:.1f} ms, "
              f"instrumented {inst:.1f} ms, {inst / bare:.2f}x (host cost only; not the GPU figure)")
        for label, off in PARTS[1:] if args.breakdown else ():
            with without(off):
                ms = min(steps(True) for _ in range(args.rounds))
            print(f"  {label}: {ms:.1f} ms, {ms / bare:.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=24)
    parser.add_argument("--dim", type=int, default=None, help="model width (default 1024; 64 with --cpu-proxy)")
    parser.add_argument("--max-len", type=int, default=1024, help="KV cache length")
    parser.add_argument("--vocab", type=int, default=32000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=400, help="decode steps per replay timing")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--breakdown", action="store_true", help="also time captures with each part of the "
                        "instrumentation off")
    parser.add_argument("--cpu-proxy", action="store_true", help="host-side cost on the CPU, for profiling")
    args = parser.parse_args()
    if args.cpu_proxy:
        args.dim = args.dim or 64
        cpu_proxy_main(args)
    else:
        args.dim = args.dim or 1024
        gpu_main(args)


if __name__ == "__main__":
    main()
