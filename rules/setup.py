"""setup (CG90x): how a capture is prepared.

Warmup before capture, autocast caching, activation checkpointing, capturable
optimizers, module hooks, DDP, compiled functions and capture-only branches. Each
of these either fails capture or makes the captured path differ from eager.
"""
from __future__ import annotations

from typing import Iterator, Optional

import libcst as cst

from cglint.engine.captures import CaptureKind, capture_method
from cglint.engine.syntax import assigned_names, calls_in, code_of, decorator_callee, descendants, dotted_name, keyword, positional
from cglint.rule import CAPTURE, Hit, Rule

def _manual(capture) -> bool:
    """Captures that do no warmup of their own (make_graphed_callables and torch.compile do)."""
    return capture is not None and capture.kind in (CaptureKind.GRAPH_BLOCK, CaptureKind.CAPTURE_SPAN, CaptureKind.HELPER)


def _is_false(node: Optional[cst.BaseExpression]) -> bool:
    return isinstance(node, cst.Name) and node.value == "False"


# --- warmup evidence ---------------------------------------------------------------
def _roots(expr: cst.BaseExpression) -> Iterator[cst.Name]:
    """Names an expression reads at its root (`model` in `model.encoder(x)`, not `encoder`)."""
    stack = [expr]
    while stack:
        current = stack.pop()
        if isinstance(current, cst.Name):
            yield current
        elif isinstance(current, cst.Attribute):
            stack.append(current.value)
        elif isinstance(current, cst.Call):
            stack.append(current.func)
            stack.extend(a.value for a in current.args)
        elif isinstance(current, cst.Subscript):
            stack.append(current.value)
        elif isinstance(current, (cst.Tuple, cst.List)):
            stack.extend(e.value for e in current.elements)


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
        if ctx.value(call.func).targets or root.targets or root.tag in _WARMABLE:
            found.append(call)
    return found


_WARMABLE = ("module", "module_container", "compiled", "ddp", "optimizer")


def _bound(statements, imports: bool = True) -> set[str]:
    """Names the statements bind (assignments, loops, with-as, defs, and imports if asked)."""
    names: set[str] = set()
    for stmt in statements:
        for node in [stmt, *descendants(stmt)]:
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


def _warmupcalls_in(entries: list[cst.Call], before: list) -> list[cst.Call]:
    """Calls before the capture that run what it captures: the same callee, a helper given
    it (`warmup(model, x)`), or anything named like a warmup."""
    wanted = {code_of(c.func) for c in entries}
    wanted |= {code_of(c.func.value) for c in entries if isinstance(c.func, cst.Attribute)}
    found = []
    for call in calls_in(before):
        func = code_of(call.func)
        if func in wanted or "warm" in func.lower() or any(code_of(a.value) in wanted for a in call.args):
            found.append(call)
    return found


def _on_side_stream(call: cst.Call, function, ctx) -> bool:
    for outer in ctx.enclosing(call, function):
        if isinstance(outer, cst.With) and any(
            isinstance(i.item, cst.Call) and ctx.call_name(i.item) in ctx.api.streams.context for i in outer.items
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
            if ctx.qualname(decorator_callee(decorator)) in ctx.api.capture.compile:
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
    )

    def check(self, node, ctx):
        capture = ctx.capture
        if not _manual(capture):
            return
        before = ctx.site_before()
        entries = _entries(capture, ctx)
        if not entries or any(_compiled(c, ctx) for c in entries):
            return  # nothing of the project to warm up, or a compiled call: CG908 says more
        if _whole_story(entries, before, ctx) and not _warmupcalls_in(entries, before):
            yield Hit(node, {"call": code_of(entries[0])})


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
        if not _manual(capture) or capture.host is None:
            return
        if ".backward" not in capture.calls and not capture.calls & ctx.api.setup.backward:
            return
        before = ctx.site_before()
        entries = _entries(capture, ctx)
        warm = _warmupcalls_in(entries, before)
        wanted = {code_of(c.func) for c in entries}
        direct = [c for c in warm if code_of(c.func) in wanted]
        # Warmup through a helper (`warmup(model, x)`) may use a side stream: only direct calls count.
        if direct and len(direct) == len(warm) and not any(_on_side_stream(c, capture.host, ctx) for c in direct):
            yield Hit(direct[0], {"call": code_of(direct[0])})


def _caching_autocast(node: cst.CSTNode, function, ctx) -> Optional[cst.Call]:
    """The `torch.autocast(...)` around `node` whose weight-cast cache is on (no cache_enabled=False)."""
    for outer in ctx.enclosing(node, function):
        if not isinstance(outer, cst.With):
            continue
        for item in outer.items:
            call = item.item
            if isinstance(call, cst.Call) and ctx.call_name(call) in ctx.api.setup.autocast:
                if _is_false(keyword(call, "cache_enabled")) or _is_false(keyword(call, "enabled")):
                    continue
                device = keyword(call, "device_type") or (positional(call)[0] if positional(call) else None)
                if device is not None and code_of(device).strip("'\"") == "cpu":
                    continue
                return call
    return None


def _autocast_fix(node: cst.CSTNode, ctx):
    """`cache_enabled=False` on the autocast named in the finding, around `node`. Autocast then
    casts the weights on every use instead of caching the casts: the same values, always fresh."""
    for outer in ctx.ancestors(node):
        for item in outer.items if isinstance(outer, cst.With) else ():
            call = item.item
            if isinstance(call, cst.Call) and code_of(call) == ctx.details.get("autocast"):
                return {call: ctx.with_keyword(call, "cache_enabled", cst.Name("False"))}
    return None


_AUTOCAST_FIX_SAFETY = "Safe: `--fix` adds `cache_enabled=False` to the autocast; the casts compute the same values, made afresh for every use."


class AutocastCacheAroundCapture(Rule):
    code = "CG903"
    name = "capture-inside-caching-autocast"
    category = "setup"
    severity = "warning"
    summary = "Captures a graph inside `torch.autocast(...)` without `cache_enabled=False`."
    message = "this capture runs inside `{autocast}`, whose cache keeps the low-precision weight copies made before capture; the graph reads those copies, which go stale when the weights change (and are freed when autocast exits)"
    fix_hint = "Pass `cache_enabled=False` to the autocast around the capture (and around its warmup)."
    why = """Autocast caches the fp16/bf16 copy of each weight for as long as the outermost
    autocast block is open. A capture inside that block does not cast the weights again:
    the graph reads the cached copies made during warmup. After an optimizer step the
    replays keep using the old weights, and when the autocast block exits the copies are
    freed while the graph still reads them. Results diverge from eager silently."""
    fix_safety = _AUTOCAST_FIX_SAFETY
    scope = CAPTURE
    nodes = (cst.With, cst.Call)
    invalid = (
        '''
import torch

with torch.autocast("cuda", dtype=torch.float16):
    for _ in range(3):
        static_y = model(static_x)
    with torch.cuda.graph(g):  # expect: CG903
        static_y = model(static_x)
''',
    )
    valid = (
        '''
import torch

with torch.autocast("cuda", dtype=torch.float16, cache_enabled=False):
    for _ in range(3):
        static_y = model(static_x)
    with torch.cuda.graph(g):
        static_y = model(static_x)
''',
    )

    def check(self, node, ctx):
        capture = ctx.capture
        if _manual(capture):
            autocast = _caching_autocast(node, ctx.function, ctx)
            if autocast is not None:
                yield Hit(node, {"autocast": code_of(autocast)})

    def fix(self, node, ctx):
        return _autocast_fix(node, ctx)


class AutocastCacheGraphedCallables(Rule):
    code = "CG910"
    name = "graphed-callables-inside-caching-autocast"
    category = "setup"
    severity = "error"
    summary = "Calls `make_graphed_callables` inside `torch.autocast(...)` without `cache_enabled=False`."
    message = "`{expr}` runs inside `{autocast}` with its cast cache on; make_graphed_callables refuses this (`make_graphed_callables does not support the autocast caching`)"
    fix_hint = "Pass `cache_enabled=False` to the autocast that surrounds graphing (and later replays)."
    why = """The forward and backward graphs of make_graphed_callables are captured separately;
    cached weight casts made while capturing the forward would be freed before the
    backward graph replays. PyTorch checks for an active autocast cache and raises."""
    fix_safety = _AUTOCAST_FIX_SAFETY
    scope = CAPTURE
    nodes = (cst.Call,)
    invalid = (
        '''
import torch

model = torch.nn.Linear(16, 16).cuda()
sample = torch.randn(8, 16, device="cuda")
with torch.autocast("cuda", dtype=torch.float16):
    graphed = torch.cuda.make_graphed_callables(model, (sample,))  # expect: CG910
''',
    )
    valid = (
        '''
import torch

model = torch.nn.Linear(16, 16).cuda()
sample = torch.randn(8, 16, device="cuda")
with torch.autocast("cuda", dtype=torch.float16, cache_enabled=False):
    graphed = torch.cuda.make_graphed_callables(model, (sample,))
''',
    )

    def check(self, node, ctx):
        capture = ctx.capture
        if capture is not None and capture.kind is CaptureKind.GRAPHED_CALLABLES:
            autocast = _caching_autocast(node, ctx.function, ctx)
            if autocast is not None:
                yield Hit(node, {"autocast": code_of(autocast)})

    def fix(self, node, ctx):
        return _autocast_fix(node, ctx)


class CheckpointRngState(Rule):
    code = "CG904"
    name = "checkpoint-preserves-rng-in-capture"
    category = "setup"
    severity = "info"
    summary = "Calls `torch.utils.checkpoint.checkpoint` in captured code without `preserve_rng_state=False`."
    message = "`{expr}` saves and restores the CUDA RNG state inside a capture, which PyTorch versions without graph-safe generator state refuse (`Cannot call CUDAGeneratorImpl::current_seed during CUDA graph capture`)"
    fix_hint = "Pass `preserve_rng_state=False` (and use dropout-free recomputation or graph-safe RNG), or skip checkpointing while capturing."
    why = """With preserve_rng_state=True (the default), checkpoint reads the CUDA generator's
    seed and offset before the forward and restores them before recomputing. Older
    PyTorch versions refuse both while a graph is capturing (pytorch issues 83148, 162504).
    On torch 2.11 (H100) the capture succeeded, so this is info for code that must also
    run on those versions."""
    nodes = (cst.Call,)
    invalid = (
        '''
import torch
from torch.utils.checkpoint import checkpoint

def forward(block, x):
    return checkpoint(block, x, use_reentrant=False)  # expect: CG904

with torch.cuda.graph(g):
    static_out = forward(block, static_x)
''',
    )
    valid = (
        '''
import torch
from torch.utils.checkpoint import checkpoint

def forward(block, x):
    return checkpoint(block, x, use_reentrant=False, preserve_rng_state=False)

with torch.cuda.graph(g):
    static_out = forward(block, static_x)
''',
    )

    def check(self, node, ctx):
        if ctx.call_name(node) in ctx.api.setup.checkpoint and not _is_false(keyword(node, "preserve_rng_state")):
            yield node


class OptimizerNotCapturable(Rule):
    code = "CG905"
    name = "optimizer-not-capturable"
    category = "setup"
    severity = "error"
    summary = "Captures `optimizer.step()` of an optimizer built without `capturable=True`."
    message = "`{expr}` steps `{optimizer}`, built without capturable=True; PyTorch refuses to capture it (`Attempting CUDA graph capture of step() ... but param_groups' capturable is False`)"
    fix_hint = "Build the optimizer with `capturable=True` (its step counters then live on the device)."
    why = """Optimizers such as Adam keep their step count on the host unless capturable=True,
    and their step() checks for capture and raises. With capturable=True the state stays
    on the device and every replay advances it."""
    fix_safety = "Safe: capturable=True computes the same update, with the step count on the device."
    nodes = (cst.Call,)
    invalid = (
        '''
import torch

opt = torch.optim.Adam(model.parameters(), lr=1e-3)
with torch.cuda.graph(g):
    loss = model(static_x).sum()
    loss.backward()
    opt.step()  # expect: CG905
''',
    )
    valid = (
        '''
import torch

opt = torch.optim.Adam(model.parameters(), lr=1e-3, capturable=True)
with torch.cuda.graph(g):
    loss = model(static_x).sum()
    loss.backward()
    opt.step()
''',
    )

    def check(self, node, ctx):
        method = ctx.method(node)
        if method is None or method[1] != "step":
            return
        optimizer = ctx.value(method[0])
        if optimizer.tag != "optimizer" or optimizer.origin is None:
            return
        if optimizer.origin.qualname not in ctx.api.setup.capturable_optimizers:
            return
        flag = keyword(optimizer.origin.call, "capturable")
        if flag is None or _is_false(flag):
            yield Hit(node, {"optimizer": code_of(method[0])})


class HooksOnGraphedModule(Rule):
    code = "CG906"
    name = "hooks-on-graphed-module"
    category = "setup"
    severity = "error"
    summary = "Passes a module with forward or backward hooks registered on it to `make_graphed_callables`."
    message = "`{module}` has a hook registered (`{hook}`); make_graphed_callables refuses modules with hooks (`Modules must not have hooks registered at the time they are passed`)"
    fix_hint = "Register hooks after graphing on submodules that are not graphed, or remove them (`handle.remove()`) before calling make_graphed_callables."
    why = """make_graphed_callables replaces the module's forward with graph replays; hooks
    would run once at capture and never again, so it checks that the module has no
    forward, forward-pre or backward hooks and raises."""
    scope = CAPTURE
    nodes = (cst.Call,)
    invalid = (
        '''
import torch

model = torch.nn.Linear(16, 16).cuda()
handle = model.register_forward_hook(lambda m, i, o: None)
sample = torch.randn(8, 16, device="cuda")
graphed = torch.cuda.make_graphed_callables(model, (sample,))  # expect: CG906
''',
    )
    valid = (
        '''
import torch

model = torch.nn.Linear(16, 16).cuda()
handle = model.register_forward_hook(lambda m, i, o: None)
handle.remove()
sample = torch.randn(8, 16, device="cuda")
graphed = torch.cuda.make_graphed_callables(model, (sample,))
''',
    )

    def check(self, node, ctx):
        capture = ctx.capture
        if capture is None or capture.kind is not CaptureKind.GRAPHED_CALLABLES or not positional(node):
            return
        first = positional(node)[0]
        modules = {code_of(e.value) for e in first.elements} if isinstance(first, (cst.Tuple, cst.List)) else {code_of(first)}
        before = ctx.before(node)
        removed = {code_of(c.func.value) for c in calls_in(before) if isinstance(c.func, cst.Attribute) and c.func.attr.value == "remove"}
        for stmt in before:
            for call in calls_in([stmt]):
                func = call.func
                if isinstance(func, cst.Attribute) and func.attr.value in ctx.api.setup.hook_methods and code_of(func.value) in modules:
                    handles = [code_of(t.target) for t in stmt.body[0].targets] if _is_assign(stmt) else []
                    if not any(h in removed for h in handles):
                        yield Hit(node, {"module": code_of(func.value), "hook": code_of(call)})
                        return


def _is_assign(stmt) -> bool:
    return isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1 and isinstance(stmt.body[0], cst.Assign)


class DdpCaptureSetup(Rule):
    code = "CG907"
    name = "ddp-capture-setup"
    category = "setup"
    severity = "error"
    summary = "Graphs a DistributedDataParallel model without the documented setup: DDP built on a side stream and at least 11 warmup iterations."
    message = "`{expr}` graphs a DDP model {problem}; DDP's first iterations still allocate buckets and record timing events, which fails or corrupts the capture"
    fix_hint = "Set TORCH_NCCL_ASYNC_ERROR_HANDLING=0, build DDP inside `with torch.cuda.stream(side):`, and warm up at least 11 iterations (`num_warmup_iters=11`)."
    why = """DDP does lazy work in its first iterations (bucket rebuilding, runtime statistics
    with CUDA timing events) and the NCCL watchdog polls events. PyTorch's documentation
    for capturing DDP asks for async error handling off, the DDP constructor run on a side
    stream, and 11 eager warmup iterations before capture."""
    scope = CAPTURE
    nodes = (cst.Call,)
    invalid = (
        '''
import torch
from torch.nn.parallel import DistributedDataParallel

model = DistributedDataParallel(torch.nn.Linear(16, 16).cuda())
sample = torch.randn(8, 16, device="cuda")
graphed = torch.cuda.make_graphed_callables(model, (sample,))  # expect: CG907
''',
    )
    valid = (
        '''
import os
import torch
from torch.nn.parallel import DistributedDataParallel

os.environ["TORCH_NCCL_ASYNC_ERROR_HANDLING"] = "0"
side = torch.cuda.Stream()
with torch.cuda.stream(side):
    model = DistributedDataParallel(torch.nn.Linear(16, 16).cuda())
torch.cuda.current_stream().wait_stream(side)
sample = torch.randn(8, 16, device="cuda")
graphed = torch.cuda.make_graphed_callables(model, (sample,), num_warmup_iters=11)
''',
    )

    def check(self, node, ctx):
        capture = ctx.capture
        if capture is None or capture.kind is not CaptureKind.GRAPHED_CALLABLES or not positional(node):
            return
        first = positional(node)[0]
        for module in [e.value for e in first.elements] if isinstance(first, (cst.Tuple, cst.List)) else [first]:
            value = ctx.value(module)
            if value.tag != "ddp" or value.origin is None:
                continue
            problems = []
            iters = keyword(node, "num_warmup_iters")
            count = ctx.value(iters).const if iters is not None else 3
            if isinstance(count, int) and count < 11:
                problems.append(f"with {count} warmup iterations (DDP needs 11)")
            if not _on_side_stream(value.origin.call, value.origin.function, ctx):
                problems.append("built on the default stream")
            if problems:
                yield Hit(node, {"problem": " and ".join(problems)})
                return


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
        if not _manual(capture):
            return
        before = ctx.site_before()
        entries = _entries(capture, ctx)
        compiled = [c for c in entries if _compiled(c, ctx)]
        if compiled and _whole_story(entries, before, ctx) and not _warmupcalls_in(entries, before):
            yield compiled[0]


def _does_work(statements, ctx) -> bool:
    """Statements that compute something: not only raise, pass, assert or log, and not only
    allocate a placeholder (vLLM's all-reduce returns `torch.empty_like(x)` while warming up
    to mimic the captured allocation; its result is never used)."""
    for stmt in statements:
        if isinstance(stmt, cst.SimpleStatementLine):
            for small in stmt.body:
                value = getattr(small, "value", None)
                if isinstance(value, cst.Call) and (ctx.call_name(value) or "").rsplit(".", 1)[-1] in ("empty", "empty_like", "new_empty"):
                    continue
                if isinstance(small, (cst.Assign, cst.AugAssign, cst.AnnAssign)):
                    return True
                if isinstance(small, cst.Return) and small.value is not None and code_of(small.value) != "None":
                    return True
                if isinstance(small, cst.Expr) and isinstance(small.value, cst.Call):
                    name = code_of(small.value.func).rsplit(".", 1)[-1]
                    if name not in ("print", "warn", "debug", "info", "warning", "error", "log"):
                        return True
        elif isinstance(stmt, cst.BaseCompoundStatement):
            return True
    return False


class CaptureOnlyBranch(Rule):
    code = "CG909"
    name = "capture-dependent-branch"
    category = "setup"
    severity = "warning"
    summary = "Branches on `torch.cuda.is_current_stream_capturing()` with different work on each side, so the captured path differs from the eager one."
    message = "`{expr}` makes the captured code run another path than eager execution (and warmup); replays give what the capture-only branch computes"
    fix_hint = "Make both paths compute the same result (e.g. only skip host-side checks when capturing), or test the captured path against eager."
    why = """Code that asks whether it is being captured records the capture-only branch into
    the graph, while warmup and eager runs take the other one. Unless both compute the
    same thing, replays silently differ from eager execution. Guards that only skip a
    check or raise while capturing are not reported."""
    nodes = (cst.If, cst.IfExp)
    invalid = (
        '''
import torch

def rms_norm(x, weight, eps):
    if torch.cuda.is_current_stream_capturing():  # expect: CG909
        return x * weight
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight

with torch.cuda.graph(g):
    static_out = rms_norm(static_x, static_w, 1e-6)
''',
    )
    valid = (
        '''
import torch

def rms_norm(x, weight, eps):
    if not torch.cuda.is_current_stream_capturing():
        assert x.shape[-1] == weight.shape[0]
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight

with torch.cuda.graph(g):
    static_out = rms_norm(static_x, static_w, 1e-6)
''',
    )

    def check(self, node, ctx):
        if not any(isinstance(n, cst.Call) and ctx.call_name(n) in ctx.api.capture.capturing_check for n in [node.test, *descendants(node.test)]):
            return
        if isinstance(node, cst.IfExp):
            yield node.test
            return
        body = list(node.body.body)
        if node.orelse is not None:
            other = [node.orelse] if isinstance(node.orelse, cst.If) else list(node.orelse.body.body)
        elif body and _returns(body[-1]):
            other = ctx.after(node)  # `if capturing: return fast(x)` then the eager path
        else:
            other = []
        if _does_work(body, ctx) and _does_work(other, ctx):
            yield node.test


def _returns(stmt) -> bool:
    return isinstance(stmt, cst.SimpleStatementLine) and any(isinstance(s, cst.Return) for s in stmt.body)

