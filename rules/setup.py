"""setup (CG90x): how a capture is prepared, beside warmup (warmup.py) and autocast (autocast.py).

Activation checkpointing, capturable optimizers, module hooks, DDP and capture-only
branches. Each of these either fails capture or makes the captured path differ from eager.
"""
from __future__ import annotations

import libcst as cst

from cglint import vocabulary
from cglint.engine.captures import CaptureKind
from cglint.engine.syntax import calls_in, code_of, descendants, is_false, keyword, positional
from cglint.rule import CAPTURE, Hit, Rule
from cglint.rules.warmup import on_side_stream


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
        if ctx.call_name(node) in vocabulary.names("setup.checkpoint") and not is_false(keyword(node, "preserve_rng_state")):
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
        if optimizer.origin.qualname not in vocabulary.names("setup.capturable_optimizers"):
            return
        flag = keyword(optimizer.origin.call, "capturable")
        if flag is None or is_false(flag):
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
                if isinstance(func, cst.Attribute) and func.attr.value in vocabulary.names("setup.hook_methods") and code_of(func.value) in modules:
                    handles = [code_of(t.target) for t in stmt.body[0].targets] if _is_assign(stmt) else []
                    if not any(h in removed for h in handles):
                        yield Hit(node, {"module": code_of(func.value), "hook": code_of(call)})
                        return


def _is_assign(stmt) -> bool:
    return isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1 and isinstance(stmt.body[0], cst.Assign)


# make_graphed_callables' default num_warmup_iters, and the count PyTorch's documentation
# asks for with DDP (its first iterations rebuild buckets and record timing events).
_GRAPHED_CALLABLES_WARMUP = 3
_DDP_WARMUP = 11


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
            count = ctx.value(iters).const if iters is not None else _GRAPHED_CALLABLES_WARMUP
            if isinstance(count, int) and count < _DDP_WARMUP:
                problems.append(f"with {count} warmup iterations (DDP needs {_DDP_WARMUP})")
            if not on_side_stream(value.origin.call, value.origin.function, ctx):
                problems.append("built on the default stream")
            if problems:
                yield Hit(node, {"problem": " and ".join(problems)})
                return


def _does_work(statements, ctx) -> bool:
    """Statements that compute something: not only raise, pass, assert or log, and not only
    allocate a placeholder (vLLM's all-reduce returns `torch.empty_like(x)` while warming up
    to mimic the captured allocation; its result is never used)."""
    for stmt in statements:
        if isinstance(stmt, cst.SimpleStatementLine):
            for small in stmt.body:
                value = getattr(small, "value", None)
                if isinstance(value, cst.Call) and (ctx.call_name(value) or "").rsplit(".", 1)[-1] in vocabulary.names("factories.uninitialized"):
                    continue
                if isinstance(small, (cst.Assign, cst.AugAssign, cst.AnnAssign)):
                    return True
                if isinstance(small, cst.Return) and small.value is not None and code_of(small.value) != "None":
                    return True
                if isinstance(small, cst.Expr) and isinstance(small.value, cst.Call):
                    name = code_of(small.value.func).rsplit(".", 1)[-1]
                    if name not in vocabulary.names("host_effect.reports"):
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
        if not any(isinstance(n, cst.Call) and ctx.call_name(n) in vocabulary.names("capture.capturing_check") for n in [node.test, *descendants(node.test)]):
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
