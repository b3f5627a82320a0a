"""setup (CG90x), warmup: what a manual capture runs must have run before.

The first call of a model, a training step or a compiled function initializes
libraries, caches and compiled code; done inside a capture, that work fails it.
These rules look for the warmup before the capture, and for where it ran.
"""
from __future__ import annotations

from typing import Iterator

import libcst as cst

from cglint import vocabulary
from cglint.engine.captures import CaptureKind, capture_method
from cglint.engine.definitions import FunctionInfo
from cglint.engine.syntax import assigned_names, called_names, calls_in, code_of, decorator_callee, dotted_name, executed, reads
from cglint.rule import CAPTURE, Hit, Rule


def manual_capture(capture) -> bool:
    """Captures that do no warmup of their own (make_graphed_callables and torch.compile do)."""
    return capture is not None and capture.kind in (CaptureKind.GRAPH_BLOCK, CaptureKind.CAPTURE_SPAN, CaptureKind.HELPER)


def _roots(expr: cst.BaseExpression) -> Iterator[cst.Name]:
    """Names an expression reads at its root (`model` in `model.encoder(x)`, not `encoder`)."""
    return reads(expr, lambda node: isinstance(node, (cst.Attribute, cst.Call, cst.Subscript, cst.Tuple, cst.List)))


def _entries(capture, ctx) -> list[cst.Call]:
    """Calls in the capture block of project code or of objects made before it (`model(x)`,
    `train_step(...)`, `self.runner.step()`); torch ops and tensor methods need no warmup."""
    found = []
    for call in calls_in(ctx.region_statements(capture)):
        if dotted_name(call.func) is None or capture_method(call) is not None:
            continue
        root = ctx.value(next(_roots(call.func)))
        # Project code, modules, optimizers, compiled functions: what lazily initializes on
        # a first call. Streams, events and tensors (`x.sum()`) have nothing to warm up.
        if ctx.value(call.func).targets or root.targets or root.tag in vocabulary.tags_with("warms_up"):
            found.append(call)
    return found


def _bound(statements, imports: bool = True) -> set[str]:
    """Names the statements bind (assignments, loops, with-as, defs, and imports if asked)."""
    names: set[str] = set()
    for stmt in statements:
        for node in executed(stmt):
            if isinstance(node, (cst.Assign, cst.AnnAssign, cst.AugAssign, cst.For)):
                targets = [t.target for t in node.targets] if isinstance(node, cst.Assign) else [node.target]
                names.update(leaf.value for t in targets for leaf in assigned_names(t) if isinstance(leaf, cst.Name))
            elif isinstance(node, cst.AsName) and isinstance(node.name, cst.Name):
                names.add(node.name.value)
            elif isinstance(node, cst.ImportAlias) and imports:
                names.add((dotted_name(node.name) or "").split(".")[0])
            elif isinstance(node, (cst.FunctionDef, cst.ClassDef)):
                names.add(node.name.value)
    return names


def _whole_story(entries: list[cst.Call], before: list, ctx) -> bool:
    """Whether every object the capture block's calls use is created in the statements before
    it: then no earlier code (a caller, another cell) can have warmed them up, and a missing
    warmup is certain. Parameters, `self` and globals set elsewhere make it unknown;
    project functions and imports are code, not state, and do not."""
    bound = _bound(before) | _bound(ctx.region_statements())
    for call in calls_in(ctx.region_statements()):
        for root in _roots(call):
            if root.value not in bound and ctx.qualname(root) is None:
                return False
    return bool(entries)


def _warmupcalls_in(entries: list[cst.Call], before: list, ctx) -> list[cst.Call]:
    """Calls before the capture that run what it captures: the same callee, another method of
    the same object that calls it, a helper given it (`warmup(model, x)`), or anything named
    like a warmup."""
    wanted = {code_of(c.func) for c in entries}
    wanted |= {code_of(c.func.value) for c in entries if isinstance(c.func, cst.Attribute)}
    methods = {c.func.attr.value for c in entries if isinstance(c.func, cst.Attribute)}
    found = []
    for call in calls_in(before):
        func = code_of(call.func)
        if func in wanted or "warm" in func.lower() or any(code_of(a.value) in wanted for a in call.args):
            found.append(call)
        elif isinstance(call.func, cst.Attribute) and code_of(call.func.value) in wanted and _calls_any(call, methods, ctx):
            found.append(call)  # `trainer.train_step(batch)`, which calls the captured `self.loss(...)`
    return found


def _calls_any(call: cst.Call, names: set[str], ctx) -> bool:
    """Whether the project method a call runs calls one of `names` (`self.loss(...)`)."""
    return any(
        isinstance(f, FunctionInfo) and not names.isdisjoint(called_names(f.node)) for f in ctx.value(call.func).targets
    )


def on_side_stream(call: cst.Call, function, ctx) -> bool:
    for outer in ctx.enclosing(call, function):
        if isinstance(outer, cst.With) and any(
            isinstance(i.item, cst.Call) and ctx.call_name(i.item) in vocabulary.names("streams.context") for i in outer.items
        ):
            return True
    return False


def _compiled(call: cst.Call, ctx) -> bool:
    """A call of a torch.compile'd function or module (`torch.compile(f)`, `@torch.compile`)."""
    callee = ctx.value(call.func)
    if callee.tag == "compiled":
        return True
    for target in callee.targets:
        for decorator in getattr(target, "decorators", ()):  # project functions and lambdas
            if ctx.qualname(decorator_callee(decorator)) in vocabulary.names("capture.compile"):
                return True
    return False


class CaptureWithoutWarmup(Rule):
    code = "CG901"
    name = "capture-without-warmup"
    category = "setup"
    severity = "error"
    summary = "Captures work that never ran before: no warmup of the captured calls precedes `with torch.cuda.graph(...)` / `capture_begin()`."
    message = "`{call}` is captured without ever running before; lazy initialization (cuBLAS/cuDNN workspaces, autotuning, autograd state) then happens inside the capture"
    fix_hint = "Run the captured work a few times on a side stream before capture: `s = torch.cuda.Stream(); s.wait_stream(torch.cuda.current_stream())`, `with torch.cuda.stream(s): for _ in range(3): step()`, then `torch.cuda.current_stream().wait_stream(s)`."
    why = """The first call of a model or a training step initializes libraries and caches:
    cuBLAS and cuDNN handles and workspaces, autotuning, optimizer state, gradient
    buffers. Done during capture, these allocations and synchronizations are illegal or
    get recorded into the graph. PyTorch's documentation requires a warmup on a side
    stream before capturing. Reported only when the capture block's callables are all
    created in the same function, so no earlier code could have warmed them up."""
    scope = CAPTURE
    nodes = (cst.With, cst.Call)
    invalid = (
        '''
import torch

def main():
    model = torch.nn.Linear(64, 64).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    static_x = torch.randn(32, 64, device="cuda")
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):  # expect: CG901
        loss = model(static_x).square().mean()
        loss.backward()
    for _ in range(10):
        g.replay()
        opt.step()
''',
        '''
import torch

def project(x, w):
    return torch.relu(x @ w)

def main():
    w = torch.randn(64, 64, device="cuda")
    x = torch.randn(32, 64, device="cuda")
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):  # expect: CG901
        y = project(x, w)
    g.replay()
''',
    )
    valid = (
        '''
import torch

def main():
    model = torch.nn.Linear(64, 64).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    static_x = torch.randn(32, 64, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            model(static_x).square().mean().backward()
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        loss = model(static_x).square().mean()
        loss.backward()
    for _ in range(10):
        g.replay()
        opt.step()
''',
        '''
import torch


class Trainer:
    def __init__(self):
        self.model = torch.nn.Linear(64, 1).cuda()

    def loss(self, x):
        return self.model(x).square().mean()

    def train_step(self, x):
        loss = self.loss(x)
        loss.backward()
        return loss


def main():
    trainer = Trainer()
    static_x = torch.randn(32, 64, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            trainer.train_step(static_x)  # runs the captured `loss()`: a warmup
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        loss = trainer.loss(static_x)
        loss.backward()
    g.replay()
''',
        '''
import torch

def ragged_offsets(batch, length, device):
    return torch.arange(0, (batch + 1) * length, length, dtype=torch.int32, device=device)

def test_offsets_build_inside_a_capture():
    # Creation and elementwise ops initialize no library: nothing to warm up.
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        offsets = ragged_offsets(2, 3, "cuda")
    g.replay()
    assert offsets.tolist() == [0, 3, 6]
''',
    )

    def check(self, node, ctx):
        capture = ctx.capture
        if not manual_capture(capture):
            return
        before = ctx.site_before()
        entries = _entries(capture, ctx)
        if not entries or any(_compiled(c, ctx) for c in entries):
            return  # nothing of the project to warm up, or a compiled call: CG908 says more
        if _whole_story(entries, before, ctx) and not _warmupcalls_in(entries, before, ctx) and _initializes(capture, ctx):
            yield Hit(node, {"call": code_of(entries[0])})


def _initializes(capture, ctx) -> bool:
    """Whether the captured work calls something whose first run initializes a library. A
    test that captures only `torch.arange`/`new_ones`/`zero_` metadata builders (SGLang's)
    captures fine without a warmup."""
    lazy = vocabulary.names("setup.lazy_init")
    return any(key in lazy or any(key.startswith(p) for p in lazy if p.endswith(".")) for key in capture.calls)


class WarmupOnDefaultStream(Rule):
    code = "CG902"
    name = "warmup-on-default-stream"
    category = "setup"
    severity = "info"
    summary = "Warms up a captured backward pass on the default stream instead of a side stream."
    message = "the warmup `{call}` runs on the default stream before a captured backward pass; PyTorch's documentation asks for the warmup on a side stream (older versions failed such captures)"
    fix_hint = "Run the warmup iterations inside `with torch.cuda.stream(side):` (after `side.wait_stream(torch.cuda.current_stream())`), then `torch.cuda.current_stream().wait_stream(side)`."
    why = """Autograd runs each backward op on the stream its forward ran on. After a warmup on
    the default stream, a captured backward could make the capturing stream wait on the
    default (legacy) stream, a dependency on uncaptured work that invalidated the capture
    in earlier PyTorch versions; the documentation asks for warmup on a side stream. On
    torch 2.11 (H100) such a capture succeeded and replayed like eager, so this is info."""
    scope = CAPTURE
    nodes = (cst.With, cst.Call)
    invalid = (
        '''
import torch

def main():
    model = torch.nn.Linear(64, 64).cuda()
    static_x = torch.randn(32, 64, device="cuda")
    for _ in range(3):
        model(static_x).sum().backward()  # expect: CG902
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        model(static_x).sum().backward()
''',
    )
    valid = (
        '''
import torch

def main():
    model = torch.nn.Linear(64, 64).cuda()
    static_x = torch.randn(32, 64, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            model(static_x).sum().backward()
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        model(static_x).sum().backward()
''',
    )

    def check(self, node, ctx):
        capture = ctx.capture
        if not manual_capture(capture) or capture.host is None:
            return
        if ".backward" not in capture.calls and not capture.calls & vocabulary.names("setup.backward"):
            return
        before = ctx.site_before()
        entries = _entries(capture, ctx)
        warm = _warmupcalls_in(entries, before, ctx)
        wanted = {code_of(c.func) for c in entries}
        direct = [c for c in warm if code_of(c.func) in wanted]
        # Warmup through a helper (`warmup(model, x)`) may use a side stream: only direct calls count.
        if direct and len(direct) == len(warm) and not any(on_side_stream(c, capture.host, ctx) for c in direct):
            yield Hit(direct[0], {"call": code_of(direct[0])})


class CompiledFirstCalledInCapture(Rule):
    code = "CG908"
    name = "compiled-function-first-called-in-capture"
    category = "setup"
    severity = "error"
    summary = "Calls a `torch.compile`d function for the first time inside a manual capture."
    message = "`{expr}` compiles on its first call, which happens inside the capture; compilation reads RNG state and copies host data, which capture refuses"
    fix_hint = "Call the compiled function with the same shapes before capture (on the warmup side stream), so it is compiled when the capture runs."
    why = """torch.compile traces and compiles on the first call. Dynamo saves and restores the
    CUDA RNG state around tracing, and Inductor may autotune or copy host data: all of
    it is illegal during capture, so a first call inside `torch.cuda.graph` fails
    (pytorch issues 131782, 185074). Reported only when the capture block's callables
    are all created in the same function and none ran before."""
    scope = CAPTURE
    nodes = (cst.With, cst.Call)
    invalid = (
        '''
import torch

def main():
    layer = torch.compile(torch.nn.Linear(16, 16).cuda())
    static_x = torch.randn(8, 16, device="cuda")
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        static_y = layer(static_x)  # expect: CG908
''',
    )
    valid = (
        '''
import torch

def main():
    layer = torch.compile(torch.nn.Linear(16, 16).cuda())
    static_x = torch.randn(8, 16, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            layer(static_x)
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        static_y = layer(static_x)
''',
    )

    def check(self, node, ctx):
        capture = ctx.capture
        if not manual_capture(capture):
            return
        before = ctx.site_before()
        entries = _entries(capture, ctx)
        compiled = [c for c in entries if _compiled(c, ctx)]
        if compiled and _whole_story(entries, before, ctx) and not _warmupcalls_in(entries, before, ctx):
            yield compiled[0]
