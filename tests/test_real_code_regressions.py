"""False positives found by the review of real captured code (bench/false-positive-review.md),
each reduced to the pattern that triggered it."""
from __future__ import annotations

import pytest

from tests.helpers import by_file, capture_script, codes_lines, findings


def test_lazily_initialized_global_is_not_changing_state(tmp_path):
    # vLLM's cute_context(), megatron's get_te_version(), sglang's get_nccl_mem_pool(): a
    # global memo filled once. The branch on it never flips between replays.
    found = findings(
        tmp_path,
        {
            "ctx.py": """
            _ctx = None
            _mode = False

            def context():
                global _ctx
                if _ctx is not None:
                    return _ctx
                _ctx = object()
                return _ctx

            def set_mode(value):
                global _mode
                _mode = True

            def step(x):
                if _ctx is None:
                    x = x + 1
                if _mode:  # a flag switched between replays: still reported
                    x = x * 2
                return x
            """,
            "run.py": capture_script("from ctx import set_mode, step", "y = step(x)") + "set_mode(True)\ng.replay()\n",
        },
        select=["CG202"],
    )
    assert codes_lines(found) == {("CG202", 18)}


def test_capture_begin_after_a_context_entered_by_hand_is_not_on_the_default_stream(tmp_path):
    # torch.cuda.graph.__enter__ enters `torch.cuda.stream(...)` with `stream_ctx.__enter__()`.
    found = findings(
        tmp_path,
        {
            "graphs.py": """
            import torch

            class Graph(torch.cuda.CUDAGraph):
                def capture_begin(self, pool=None):
                    super().capture_begin(pool=pool)

            class graph:
                def __init__(self, g):
                    self.g = g
                    self.stream_ctx = torch.cuda.stream(torch.cuda.Stream())

                def __enter__(self):
                    self.stream_ctx.__enter__()
                    self.g.capture_begin()

                def __exit__(self, *exc):
                    self.g.capture_end()
                    self.stream_ctx.__exit__(*exc)

            """,
            "accelerator.py": """
            import torch

            class Graph(torch.cuda.CUDAGraph):
                # torch.accelerator.Graph: captures on whatever stream its user made current.
                def capture_begin(self):
                    super().capture_begin()

                def __enter__(self):
                    self.capture_begin()

                def __exit__(self, *exc):
                    self.capture_end()
            """,
            "script.py": """
            from graphs import Graph, graph

            with graph(Graph()):
                pass
            """,
        },
        select=["CG804"],
    )
    assert not found  # Graph.capture_begin's only caller runs on the stream it entered by hand
    raw = findings(
        tmp_path / "raw",
        {"raw.py": "import torch\ng = torch.cuda.CUDAGraph()\ng.capture_begin()\ng.capture_end()\n"},
        select=["CG804"],
    )
    assert codes_lines(raw) == {("CG804", 3)}


def test_kernel_language_functions_are_device_code(tmp_path):
    # vLLM's CuTe DSL kernels: `if task_idx < task_count:` on values read from a cute.Tensor is
    # a device branch the DSL compiles, not a host read of tensor data.
    found = findings(
        tmp_path,
        {
            "kernels.py": """
            import cutlass
            import cutlass.cute as cute
            import triton

            class Kernel:
                @cute.kernel
                def kernel(self, counts, bucket):
                    if counts[bucket] > 0:
                        pass

                @cute.jit
                def __call__(self, counts, bucket):
                    self.kernel(counts, bucket)

            @triton.jit
            def add(x_ptr, n):
                if n.to(triton.language.int32) > 0:
                    pass

            def host(x):
                if x.sum() > 0:  # plain host code: still reported
                    pass
                return x
            """,
            "run.py": capture_script("from kernels import Kernel, add, host", "Kernel()(x, 0)", "add(x, 4)", "host(x)"),
        },
        select=["CG201"],
    )
    assert {(f.path.rsplit("/", 1)[-1], f.line) for f in found} == {("kernels.py", 21)}


def test_code_after_a_raise_while_capturing_guard_is_not_captured(tmp_path):
    # sglang's SP workspace: `if torch.cuda.is_current_stream_capturing(): raise ...` before a sync.
    found = findings(
        tmp_path,
        {
            "ws.py": """
            import torch

            def workspace(x, ws):
                if ws is None:
                    if torch.cuda.is_current_stream_capturing():
                        raise RuntimeError("warm up before capture")
                    torch.cuda.current_stream().synchronize()
                    ws = torch.empty_like(x)
                torch.cuda.synchronize()  # after the inner block: captured
                return ws
            """,
            "run.py": capture_script("from ws import workspace", "workspace(x, None)"),
        },
        select=["CG104"],
    )
    assert {(f.path.rsplit("/", 1)[-1], f.line) for f in found} == {("ws.py", 9)}


def test_sentinel_and_once_flag_globals_are_initialization(tmp_path):
    # sglang: `if _forced_backend is _UNRESOLVED: _forced_backend = ...` and
    # `if not _REGISTERED: _REGISTERED = True` fill module state once.
    found = findings(
        tmp_path,
        {
            "state.py": """
            _UNRESOLVED = object()
            _backend = _UNRESOLVED
            _registered = False
            _on = False

            def backend():
                global _backend
                if _backend is _UNRESOLVED:
                    _backend = "triton"
                return _backend

            def register():
                global _registered
                if not _registered:
                    _registered = True

            def toggle():
                global _on
                if not _on:
                    _on = True
                else:
                    _on = False

            def step(x):
                if backend() == "triton" and _backend:
                    x = x + 1
                if not _registered:
                    x = x * 3
                if _on:  # toggled between replays: still reported
                    x = x * 2
                return x
            """,
            "run.py": capture_script("from state import step, toggle", "y = step(x)") + "for _ in range(3):\n    toggle()\n    g.replay()\n",
        },
        select=["CG202"],
    )
    assert codes_lines(found) == {("CG202", 29)}


def test_engine_module_shapes_from_real_code(tmp_path):
    # Shapes from real engine code, each next to the hazard it must not hide: a config ratio as
    # repeats, a torch predicate as a branch, a registered buffer counted in place, a project
    # module's `update`, arguments that switch off a checking or unfused path, lazy
    # initialisation, a cached backend choice.
    found = findings(
        tmp_path,
        {
            "model.py": """
            import functools
            import logging

            import torch
            import torch.nn as nn

            logger = logging.getLogger(__name__)

            class KVCache(nn.Module):
                def __init__(self, n, d):
                    super().__init__()
                    self.register_buffer("k", torch.zeros(n, d))
                    self.register_buffer("steps", torch.zeros((), dtype=torch.long))

                def update(self, pos, k):
                    self.k[pos] = k
                    self.steps += 1
                    return self.k

            @functools.lru_cache(maxsize=None)
            def pick_backend(name):
                logger.info("choosing backend %s", name)
                return name

            class Attention(nn.Module):
                def __init__(self, n_head, n_local_heads, d):
                    super().__init__()
                    self.n_head = n_head
                    self.n_local_heads = n_local_heads
                    self.kv_cache = KVCache(16, d)
                    self.table = None

                def helper(self, x, check_bounds=True, fused=False):
                    if check_bounds:
                        assert x.max().item() < 100
                    if fused:
                        return x * 2
                    else:
                        return x.nonzero()

                def forward(self, x, pos):
                    if self.table is None:
                        self.table = torch.as_tensor([1.0, 2.0], device=x.device)
                    backend = pick_backend("flash")
                    k = self.kv_cache.update(pos, x)
                    k = k.repeat_interleave(self.n_head // self.n_local_heads, dim=0)
                    if torch.are_deterministic_algorithms_enabled():
                        x = x + 1
                    y = self.helper(x, check_bounds=False, fused=True)
                    if x.sum() > 0:  # still a branch on data
                        y = y + 1
                    return y + k.sum()
            """,
            "run.py": capture_script("from model import Attention\nm = Attention(4, 2, 8).cuda()", "y = m(x, x)"),
        },
        select=[],
    )
    assert by_file(found, tmp_path) - {("run.py", "CG901", 7)} == {("model.py", "CG201", 50)}


def test_arguments_of_the_captured_call_choose_the_path(tmp_path):
    # The same helper called with the checking path on is still reported.
    found = findings(
        tmp_path,
        {
            "ops.py": """
            def helper(x, check_bounds=True):
                if check_bounds:
                    assert x.max().item() < 100
                return x * 2
            """,
            "run.py": capture_script("from ops import helper", "y = helper(x)", "z = helper(x, check_bounds=False)"),
        },
        select=["CG101"],
    )
    assert codes_lines(found) == {("CG101", 3)}



def test_a_predicate_helper_decides_the_path_for_its_argument(tmp_path):
    # Transformer Engine's checkpoint(): `if not has_te_modules(function)` falls back to torch's
    # checkpoint, but has_te_modules returns True for any callable that is not a module, and
    # the captured layer passes a closure. Given the module itself, the fallback may run.
    model = """
        import torch
        import torch.nn as nn

        def has_fused_modules(network):
            if isinstance(network, nn.Module):
                return any(isinstance(m, FusedLinear) for m in network.modules())
            return True  # a plain callable: assume it holds fused modules

        class FusedLinear(nn.Linear):
            pass

        def checkpoint(function, *args):
            if not has_fused_modules(function):
                return torch.utils.checkpoint.checkpoint(function, *args, use_reentrant=False)
            return function(*args)

        class Block(nn.Module):
            def __init__(self):
                super().__init__()
                self.fc = FusedLinear(8, 8)

            def forward(self, x):
                def custom_forward(h):
                    return self.fc(h)
                return checkpoint({given}, x)
    """
    run = capture_script("from model import Block\nm = Block().cuda()", "y = m(x)")
    closure = findings(tmp_path / "closure", {"model.py": model.format(given="custom_forward"), "run.py": run}, select=["CG904"])
    module = findings(tmp_path / "module", {"model.py": model.format(given="self.fc"), "run.py": run}, select=["CG904"])
    assert codes_lines(closure) == set()
    assert codes_lines(module) == {("CG904", 14)}


SETUP_THEN_CAPTURE = """
import torch
import torch.nn as nn


class Head(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(8, 8)
        self.scale = 1.0
        self.bias_on = True

    def set_scale(self, s):
        self.scale = s

    def disable_bias(self):
        self.bias_on = False

    def forward(self, x):
        y = self.proj(x) * self.scale
        if self.bias_on:
            y = y + 1
        return y


def main():
    head = Head().cuda()
    head.set_scale(0.5)
    head.disable_bias()
    x = torch.zeros(2, 8, device="cuda")
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        head(x)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out = head(x)
    for _ in range(3):
REPLAY_LOOP
"""


@pytest.mark.parametrize(
    "loop, expected",
    [
        # Configuration methods run while the model is built, before the first capture: setup.
        ("        g.replay()", set()),
        # The same methods called in the replay loop change what the graph froze.
        ("        head.set_scale(0.25)\n        head.disable_bias()\n        g.replay()", {("CG601", 19), ("CG202", 20)}),
    ],
)
def test_setters_count_only_when_called_between_replays(tmp_path, loop, expected):
    found = findings(tmp_path, {"head.py": SETUP_THEN_CAPTURE.replace("REPLAY_LOOP", loop)}, select=["CG601", "CG202"])
    assert codes_lines(found) == expected


def test_star_imported_helpers_and_setup_before_a_capture_helper(tmp_path):
    # A model package re-exporting its kernels with `from .ops import *` (through two
    # modules), and a launcher that configures the model, then captures through its own
    # `capture_graph(model, ...)`: the nonzero is reached; the setter ran before the capture.
    found = findings(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/_impl.py": """
            import torch

            def helper_op(x):
                idx = x.nonzero()
                return idx.float().sum()
            """,
            "pkg/ops.py": "from ._impl import *\n",
            "pkg/layers.py": """
            import torch.nn as nn
            from .ops import *

            class Head(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.temperature = 1.0

                def set_temperature(self, t):
                    self.temperature = t

                def forward(self, x):
                    return x * self.temperature + helper_op(x)
            """,
            "pkg/run.py": """
            import torch
            from .layers import Head

            def capture_graph(model, x):
                s = torch.cuda.Stream()
                with torch.cuda.stream(s):
                    model(x)
                torch.cuda.current_stream().wait_stream(s)
                g = torch.cuda.CUDAGraph()
                with torch.cuda.graph(g):
                    out = model(x)
                return g, out

            def main():
                head = Head()
                head.set_temperature(0.7)
                x = torch.zeros(8, device="cuda")
                g, out = capture_graph(head, x)
                for _ in range(10):
                    g.replay()
            """,
        },
        select=["sync", "frozen-scalar"],
    )
    assert by_file(found, tmp_path) == {("pkg/_impl.py", "CG105", 4)}


def test_a_value_set_between_two_captures_belongs_to_the_second(tmp_path):
    # Triton's and xformers' do_bench_cudagraph: a first graph times one call, then `n_repeat`
    # is computed and a second graph, captured after it, unrolls `n_repeat` calls. Neither
    # graph ever replays with a value that changed after its own capture. A value rebound
    # after the capture that read it is still reported (`scale` below).
    found = findings(
        tmp_path,
        {
            "bench.py": """
            import torch

            def do_bench_cudagraph(fn, rep=20):
                fn()
                g = torch.cuda.CUDAGraph()
                with torch.cuda.graph(g):
                    fn()
                torch.cuda.synchronize()
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                g.replay()
                end.record()
                torch.cuda.synchronize()
                n_repeat = max(1, int(rep / start.elapsed_time(end)))
                g = torch.cuda.CUDAGraph()
                with torch.cuda.graph(g):
                    for _ in range(n_repeat):
                        fn()
                g.replay()
                return n_repeat

            def scaled(fn, x):
                scale = 1.0
                g = torch.cuda.CUDAGraph()
                with torch.cuda.graph(g):
                    for _ in range(4):
                        y = fn(x) * scale
                for s in (0.5, 2.0):
                    scale = s
                    g.replay()
                return y
            """,
        },
        select=["CG202", "CG401", "CG601"],
    )
    assert codes_lines(found) == {("CG601", 27)}
