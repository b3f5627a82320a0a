"""Functions compiled with CUDA graphs: `torch.compile(mode="reduce-overhead")`.

A compiled function is not a raw capture (docs/compiled.md). TorchDynamo traces its
Python: what it cannot trace becomes a graph break, and the function runs as several
CUDA-graphed partitions with eager code between them; Python values it reads are
guarded, and a changed value recompiles; side effects on attributes are replayed. So
`.item()`, `print(t)` or `random.uniform()` in a compiled function neither fail a capture
nor freeze: they cost speed. What does go silently wrong are outputs kept past the next
call, which the next replay overwrites in the CUDA-graph tree's memory pool.

The graph-break rules recognise the same constructs as the raw-capture rules (each names
the rules whose detection it reuses in `constructs`) and say what they mean here.
"""
from __future__ import annotations

from typing import Iterator, Optional

import libcst as cst

from cglint import vocabulary
from cglint.engine.state import Change
from cglint.engine.syntax import call_method, code_of, descendants, keyword, nearest_assignment, positional
from cglint.engine.values import Kind, output_root
from cglint.rule import COMPILED, REPLAY, Hit, Rule
from cglint.rules.control_flow import HostStateCondition, TensorCondition, conditions, operands
from cglint.rules.dynamic_shape import StaleHostSize
from cglint.rules.frozen_scalar import FrozenHostValue
from cglint.rules.host_effect import (FileIOInCapture, HostCounter, LoggingInCapture, PrintInCapture, ProgressBarInCapture,
                                     TimerInCapture)
from cglint.rules.sync import (
    BooleanMaskIndex,
    ClipGradNonfinite,
    DataDependentSize,
    DeviceToHost,
    ExplicitSync,
    GradScalerStep,
    RepeatInterleaveNoSize,
    TensorFormatted,
    TensorToScalar,
    UniqueOp,
)

_BREAK = (
    "Dynamo cannot trace it, so it breaks the graph here: the code before and after run as "
    "separate CUDA graphs and this runs eagerly between them on every call"
)


class _Reusing(Rule):
    """A compiled-mode rule that flags what some raw-capture rules find, with its own meaning."""

    applies_to = COMPILED
    constructs: tuple = ()
    fullgraph: Optional[bool] = None  # only regions compiled with (True) or without (False) fullgraph=True

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if cls.constructs:
            cls.nodes = tuple(dict.fromkeys(n for rule in cls.constructs for n in rule.nodes))

    def check(self, node, ctx):
        if self.fullgraph is not None and ctx.fullgraph != self.fullgraph:
            return
        for rule in self.constructs:
            if isinstance(node, rule.nodes):
                for hit in rule().check(node, ctx):
                    yield Hit(hit.node if isinstance(hit, Hit) else hit)


_SYNCS = (TensorToScalar, DeviceToHost, TensorFormatted, ExplicitSync, DataDependentSize, BooleanMaskIndex, UniqueOp, RepeatInterleaveNoSize, GradScalerStep, ClipGradNonfinite)
_HOST_WORK = (PrintInCapture, LoggingInCapture, FileIOInCapture, ProgressBarInCapture)


class SyncInCompiled(_Reusing):
    code = "CG112"
    name = "sync-in-compiled-function"
    category = "sync"
    severity = "info"
    fullgraph = False
    constructs = _SYNCS
    summary = "Waits for the GPU inside a function compiled with CUDA graphs: `.item()`, `.cpu()`, `print(t)`, `nonzero()`, `torch.cuda.synchronize()`..."
    message = (
        "`{expr}` waits for the GPU inside a function compiled with CUDA graphs; no capture fails: "
        "Dynamo breaks the graph here (or, for a copy to the CPU or a data-sized result such as `nonzero()`, "
        "Inductor skips CUDA graphs for the graph), "
        "so on every call it runs eagerly between the graphed parts and stalls until the GPU catches up"
    )
    fix_hint = "Keep the value on the device (`torch.where` instead of a branch, `nonzero_static`), or read it from the outputs after the call."
    why = """Under `torch.compile(mode="reduce-overhead")` a sync is not captured: TorchDynamo
    stops tracing at it (a graph break), runs it eagerly and goes on in a new graph. The
    function still computes the right values, but it runs as two or more CUDA-graph
    partitions with a host round trip between them on every call, which costs most of what
    CUDA graphs save. Severity info: results are right; only speed is lost. With
    `fullgraph=True`, the constructs Dynamo cannot trace at all (a printed tensor,
    `torch.cuda.synchronize()`) are compile errors (CG911). On a GPU (H100),
    `.item()` followed by a branch, `print(t.max())` and `nonzero()` in a compiled forward ran
    correctly on every call with two CUDA-graph partitions."""
    invalid = (
        '''
import torch

class Decoder(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(64, 64)

    def forward(self, x):
        y = self.proj(x)
        peak = y.abs().max().item()  # expect: CG112
        print(y.max())  # expect: CG112
        return y / peak

step = torch.compile(Decoder().cuda(), mode="reduce-overhead")
''',
    )
    valid = (
        '''
import torch

class Decoder(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(64, 64)

    def forward(self, x):
        y = self.proj(x)
        return y / y.abs().max()

step = torch.compile(Decoder().cuda(), mode="reduce-overhead")
''',
        '''
import torch

def forward(model, x):
    return model(x).sum().item()

compiled = torch.compile(forward, mode="max-autotune-no-cudagraphs")
''',
    )


class TensorBranchInCompiled(_Reusing):
    code = "CG203"
    name = "tensor-branch-in-compiled-function"
    category = "control-flow"
    severity = "info"
    fullgraph = False
    constructs = (TensorCondition,)
    summary = "Branches on tensor data inside a function compiled with CUDA graphs."
    message = "`{expr}` decides a Python branch from tensor data inside a compiled function: " + _BREAK + ", after reading the value from the GPU"
    fix_hint = "Select with `torch.where`, or use `torch.cond` so both branches stay in the graph."
    why = """Dynamo traces one path and cannot decide a Python `if` on a tensor value, so it
    breaks the graph at the condition, reads the value (a sync) and goes on tracing the
    branch taken, compiling each side as it is met. The results are right, but every call
    runs two CUDA-graph partitions with a host round trip between them. Severity info: only
    speed is lost. With `fullgraph=True` it is a compile error (CG911)."""
    invalid = (
        '''
import torch

@torch.compile(mode="reduce-overhead")
def clip_update(param, grad, lr):
    norm = grad.norm()
    if norm > 1.0:  # expect: CG203
        grad = grad / norm
    return param - grad * lr
''',
    )
    valid = (
        '''
import torch

@torch.compile(mode="reduce-overhead")
def clip_update(param, grad, lr):
    norm = grad.norm()
    grad = torch.where(norm > 1.0, grad / norm, grad)
    return param - grad * lr
''',
    )


class HostWorkInCompiled(_Reusing):
    code = "CG508"
    name = "host-work-in-compiled-function"
    category = "host-effect"
    severity = "info"
    fullgraph = False
    constructs = _HOST_WORK
    summary = "Prints, logs, writes files or updates progress bars inside a function compiled with CUDA graphs."
    message = "`{expr}` is host work inside a compiled function; it runs on every call, but " + _BREAK
    fix_hint = "Do host work outside the compiled function (on its outputs), or guard it with `if not torch.compiler.is_compiling():`."
    why = """Unlike a raw capture, a compiled function does not lose its host work: Dynamo
    cannot trace a print, a log call or a file write, so it breaks the graph, runs the
    call eagerly and resumes in a new graph. Nothing is silently dropped, but the function
    runs as several CUDA-graph partitions on every call. Severity info: only speed is
    lost. With `fullgraph=True` it is a compile error (CG911)."""
    invalid = (
        '''
import logging
import torch

logger = logging.getLogger(__name__)

@torch.compile(mode="reduce-overhead")
def score(model, batch):
    logits = model(batch)
    logger.info("scored a batch")  # expect: CG508
    return logits.softmax(-1)
''',
    )
    valid = (
        '''
import logging
import torch

logger = logging.getLogger(__name__)

@torch.compile(mode="reduce-overhead")
def score(model, batch):
    return model(batch).softmax(-1)

def serve(model, batch):
    probs = score(model, batch)
    logger.info("scored a batch")
    return probs
''',
    )


class GraphBreakWithFullgraph(_Reusing):
    code = "CG911"
    name = "graph-break-with-fullgraph"
    category = "setup"
    severity = "error"
    fullgraph = True
    # What torch rejects under fullgraph=True (torch 2.13 on the CPU, `backend="eager"`, and on
    # a GPU with torch 2.11; tests/test_compiled.py runs the CPU half): a branch on tensor data or
    # on a number read from it, a tensor formatted by print/str/repr/format, print, logging, file
    # I/O, clocks, progress bars, torch.cuda.synchronize(). What it compiles is no CG911:
    # `.item()`, `float(t)`/`int(t)` used in arithmetic or as a size, `nonzero()`, `x[mask]`,
    # `unique`, `.cpu()`, f-strings and `"{}".format(t)`, and `assert <tensor>` (an async assert).
    constructs = (TensorCondition, TensorFormatted, ExplicitSync, PrintInCapture, LoggingInCapture,
                  FileIOInCapture, ProgressBarInCapture, TimerInCapture)
    summary = "A graph break (a branch on tensor data, `print`, logging, a printed tensor, `torch.cuda.synchronize()`...) inside a function compiled with `fullgraph=True` and CUDA graphs."
    message = "`{expr}` {reason}, and the function is compiled with fullgraph=True: the first call fails to compile"
    fix_hint = "Keep the work on the device (`torch.where`, `torch.cond`), move host work out of the compiled function or under `if not torch.compiler.is_compiling():`, or drop `fullgraph=True`."
    why = """`fullgraph=True` asks Dynamo for one graph and turns every graph break into an
    error raised by the first call, in the compiled function and in every function it calls.
    On a GPU (H100, torch 2.11) a branch on `.item()`, `print(t.max())`, `print("step")` and
    `torch.cuda.synchronize()` failed to compile this way; on the CPU (torch 2.13) so did a
    branch on `x.sum() > 0` ("Data-dependent branching"), one on a number read with `.item()`
    or `float(t)` ("Could not guard on data-dependent expression"), `str(t)`, logging, `open()`
    and `time.time()`. Under fullgraph=True Dynamo captures `.item()` used in arithmetic,
    `nonzero()` and boolean masks into the graph, so they are no compile error. Without
    `fullgraph=True` the same constructs cost speed (CG112, CG203, CG508)."""
    invalid = (
        '''
import torch

@torch.compile(mode="reduce-overhead", fullgraph=True)
def normalize(x):
    print("max", x.abs().max())  # expect: CG911
    return x / x.abs().max()
''',
        '''
import torch

def clip(grad):
    norm = grad.norm()
    if norm.item() > 1.0:  # expect: CG911
        grad = grad / norm
    return grad

@torch.compile(mode="reduce-overhead", fullgraph=True)
def update(param, grad, lr):
    if grad.abs().max() > 10:  # expect: CG911
        grad = grad.clamp(-10, 10)
    return param - clip(grad) * lr
''',
    )
    valid = (
        '''
import torch

@torch.compile(mode="reduce-overhead", fullgraph=True)
def normalize(x):
    return x / x.abs().max()
''',
        '''
import torch

@torch.compile(mode="reduce-overhead", fullgraph=True)
def update(param, grad, lr):
    norm = grad.norm()
    grad = torch.where(norm > 1.0, grad / norm, grad)
    assert torch.isfinite(norm)
    return param - grad * lr * norm.item()
''',
    )

    def check(self, node, ctx):
        if not ctx.fullgraph:
            return
        if isinstance(node, TensorCondition.nodes):
            for part in _data_dependent_tests(node, ctx):
                yield Hit(part, {"reason": "decides a Python branch from tensor data, which Dynamo cannot trace"})
        for rule in self.constructs[1:]:
            if not isinstance(node, rule.nodes):
                continue
            for hit in rule().check(node, ctx):
                found = hit.node if isinstance(hit, Hit) else hit
                if rule is TensorFormatted and not isinstance(found, cst.Call):
                    continue  # an f-string of a tensor compiles (torch 2.13)
                yield Hit(found, {"reason": "cannot be traced by Dynamo"})


def _data_dependent_tests(node: cst.CSTNode, ctx) -> Iterator[cst.BaseExpression]:
    """The parts of a condition at `node` whose truth comes from tensor data: a tensor, or a
    Python number read from one (`v = t.item(); if v > 0:`, a size of a `nonzero()` result).
    Dynamo cannot guard on either. `assert <tensor>` is compiled to an asynchronous assert."""
    if isinstance(node, cst.Assert) and ctx.is_device_tensor(node.test):
        return
    parts = [node.left] if isinstance(node, cst.BooleanOperation) else [p for c in conditions(node) for p in operands(c, ctx)]
    for part in parts:
        value = ctx.value(part)
        if value.kind == Kind.TENSOR or (value.kind == Kind.HOST and value.data):
            yield part


class GuardedValueChanges(_Reusing):
    code = "CG603"
    name = "guarded-value-changes-between-calls"
    category = "frozen-scalar"
    severity = "info"
    constructs = (FrozenHostValue, HostStateCondition, StaleHostSize, HostCounter)
    summary = "A compiled function reads a Python number or flag that changes between its calls (a counter, a schedule)."
    message = (
        "`{expr}` {change}; Dynamo guards on it, so a new value "
        "recompiles the function (or, once Dynamo makes the number dynamic, records a new CUDA graph for it), "
        "and past the recompile limit the function runs eagerly"
    )
    fix_hint = "Pass changing numbers as device tensors (`torch.tensor(lr, device=...)` filled with `.fill_()`), or keep them out of the compiled function."
    why = """A compiled function is not frozen: Dynamo specialises on the Python values it
    reads (ints, floats, flags, attributes of modules) and guards on them. When the value
    changes, the guard fails and the function is compiled again; a counter that changes on
    every call recompiles on every call until `torch._dynamo.config.recompile_limit`
    (8 by default), after which the function runs without compilation or CUDA graphs. A
    number Dynamo turns dynamic instead gets a new CUDA graph per value, which grows the
    memory pool. Results stay right: severity info. It is reported only where the change is
    seen running between calls: a counter stepped in the compiled code, a write in the loop
    that calls the function, or a setter called there (shown as related locations). An
    attribute of an object the function builds on each call, or one that only a method
    nothing calls writes, stays as it is: Dynamo does not recompile."""
    invalid = (
        '''
import torch

class Decoder(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(64, 64)
        self.calls = 0

    def forward(self, x):
        self.calls += 1  # expect: CG603
        return self.proj(x)

step = torch.compile(Decoder().cuda(), mode="reduce-overhead")
''',
        '''
import torch

class Scaler:
    def __init__(self):
        self.scale = 1.0

    def set_scale(self, scale):
        self.scale = scale

scaler = Scaler()

@torch.compile(mode="reduce-overhead")
def step(x):
    return x * scaler.scale  # expect: CG603

for i in range(10):
    scaler.set_scale(0.9 ** i)
    step(torch.randn(8, device="cuda"))
''',
    )
    valid = (
        '''
import torch

class Decoder(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(64, 64)
        self.register_buffer("calls", torch.zeros((), dtype=torch.long))

    def forward(self, x):
        self.calls += 1
        return self.proj(x)

step = torch.compile(Decoder().cuda(), mode="reduce-overhead")
''',
        '''
import torch

class Batch:
    def __init__(self, x):
        self.x = x
        self.batch_size = x.shape[0]

    def resize(self, n):
        self.batch_size = n

@torch.compile(mode="reduce-overhead")
def step(x):
    batch = Batch(x)  # built on every call: no other call changes it
    return batch.x * batch.batch_size

for i in range(10):
    Batch(torch.ones(2)).resize(i)  # another object
    step(torch.randn(8, device="cuda"))
''',
    )

    def check(self, node, ctx):
        for rule in self.constructs:
            if not isinstance(node, rule.nodes):
                continue
            for hit in rule().check(node, ctx):
                found = hit.node if isinstance(hit, Hit) else hit
                if rule is HostCounter:  # stepped here, on every call
                    yield Hit(found, {"change": "changes a Python value on every call"})
                    continue
                details = hit.details if isinstance(hit, Hit) else {}
                state = details.get("state")
                if not isinstance(state, Change) or not state.runs:
                    continue  # no write seen running between calls: no recompile to report
                text = state.replace("between replays", "between calls")
                read = f"`{details.get('read') or code_of(found)}` "
                if text.startswith(read):
                    text = text[len(read):]
                change = f"reads a Python value that changes between calls: {text}" if text.startswith("`") else f"reads a Python value that {text}"
                yield Hit(found, {"change": change, "related": state.sites})


# --- between calls ----------------------------------------------------------------

_MARK_STEP = "torch.compiler.cudagraph_mark_step_begin"


def _compiled_call_in(node: cst.CSTNode, ctx):
    """The first call of a function compiled with CUDA graphs in `node` (itself included), and
    its capture. A function CUDA-graph trees skip (see `_skipped`) runs eagerly: its outputs
    are fresh tensors and keeping them is safe."""
    for inner in [node, *descendants(node)]:
        capture = _compiled_capture(inner, ctx)
        if capture is not None:
            return inner, capture
    return None, None


def _compiled_capture(node: cst.CSTNode, ctx):
    if not isinstance(node, cst.Call):
        return None
    capture = ctx.compiled_capture(node)
    return capture if capture is not None and not any(_skipped(t, ctx) for t in capture.targets) else None


def _kept_call(stored: cst.BaseExpression, ctx):
    """The compiled call whose output `stored` still holds: the call itself or a view of it, also
    as an item of a tuple or list (`(f(x), y)`), not a copy (`f(x).clone()`, `f(x).cpu()`)."""
    root = output_root(stored)
    if isinstance(root, (cst.Tuple, cst.List)):
        for element in root.elements:
            found = _kept_call(element.value, ctx)
            if found[0] is not None:
                return found
        return None, None
    capture = _compiled_capture(root, ctx)
    return (root, capture) if capture is not None else (None, None)


def _skipped(function, ctx) -> bool:
    """What CG957 reports, read from the compiled function's own body: a tensor created on the
    CPU (a factory with no `device=`) or a tensor argument written in place. On the GPU, torch
    skipped CUDA graphs for such a function ("skipping cudagraphs due to ...") and kept
    outputs were not overwritten (fixtures/compiled_mode/scoring.py)."""
    node = getattr(function, "node", None)
    if not isinstance(node, cst.FunctionDef):
        return False
    params = {p.name.value for p in function.params}
    for inner in descendants(node):
        if not isinstance(inner, cst.Call):
            continue
        name = ctx.call_name(inner) or ""
        if name in vocabulary.names("factories.creation") and not name.endswith("_like") and keyword(inner, "device") is None:
            return True
        method = call_method(inner)
        if method is not None and _in_place(method[1]) and isinstance(method[0], cst.Name) and method[0].value in params:
            return True
    return False


def _marks_steps(node: cst.CSTNode, ctx) -> bool:
    return any(isinstance(n, cst.Call) and ctx.call_name(n) == _MARK_STEP for n in descendants(node))


def _base_name(expr: cst.BaseExpression) -> Optional[str]:
    """`out` for `out`, `out[:, -1]`, `out.logits`: what still aliases the output's memory."""
    while isinstance(expr, (cst.Subscript, cst.Attribute)):
        expr = expr.value
    return expr.value if isinstance(expr, cst.Name) else None


def _binding(name: str, before: list, ctx):
    """The nearest earlier statement that binds `name`, with the compiled capture when its value
    comes from a call of a compiled function (`out = step(x)`, `out, cache = step(x, cache)`)."""
    found = nearest_assignment(name, before)
    if found is None:
        return None, None
    statement, value = found
    return statement, ctx.compiled_capture(value) if isinstance(value, cst.Call) else None


def _target_names(target: cst.BaseExpression) -> set[str]:
    if isinstance(target, cst.Name):
        return {target.value}
    if isinstance(target, (cst.Tuple, cst.List)):
        return set().union(*(_target_names(e.value) for e in target.elements))
    return set()


class CompiledOutputKept(Rule):
    code = "CG956"
    name = "compiled-output-kept-across-calls"
    category = "memory"
    severity = "warning"
    scope = REPLAY
    applies_to = COMPILED
    summary = "Keeps an output of a function compiled with CUDA graphs past its next call without `.clone()`."
    message = (
        "`{output}`, an output of `{call}`, is used after the next call of the compiled function (at `{expr}`); "
        "that call's replay writes its outputs into the same CUDA-graph memory, so the kept tensor silently changes "
        "(or reading it raises, where the call recorded a new graph)"
    )
    fix_hint = "Keep a copy (`{output}.clone()`), or call `torch.compiler.cudagraph_mark_step_begin()` before each call so that reading an overwritten output raises an error."
    why = """With `mode="reduce-overhead"` the outputs of a compiled call live in the CUDA-graph
    tree's memory pool, and the next replay of the same graph writes its outputs there
    again. A tensor kept from an earlier call (appended to a list in a loop, stored in a dict,
    or held in a variable while the function is called again) then holds the newest
    results, not its own, and nothing raises. On a GPU (H100), appending the outputs of a
    compiled function to a list in a loop gave results that differed from eager by up to
    1.25. Where the later call records a new graph instead of replaying (a new input shape,
    the first calls), torch invalidates the old outputs and reading one raises "accessing
    tensor output of CUDAGraphs that has been overwritten by a subsequent run" (H200, a
    multistep solver keeping the previous step's output). `.clone()` copies the output out of the pool;
    `torch.compiler.cudagraph_mark_step_begin()` before each call makes a read of an
    overwritten output raise an error instead."""
    nodes = (cst.Call, cst.Name)
    invalid = (
        '''
import torch

def generate(model, tokens, steps):
    step = torch.compile(model, mode="reduce-overhead")
    all_logits = []
    for _ in range(steps):
        logits = step(tokens)
        all_logits.append(logits)  # expect: CG956
        tokens = logits.argmax(-1)
    return torch.stack(all_logits)
''',
        '''
import torch

@torch.compile(mode="reduce-overhead")
def embed(model, x):
    return model(x)

def compare(model, a, b):
    first = embed(model, a)
    second = embed(model, b)
    return (first - second).abs().max()  # expect: CG956
''',
        '''
import torch

class ChunkScorer:
    def __init__(self, model, use_compile=True):
        self.fn = torch.compile(model, mode="reduce-overhead") if use_compile else model
        self.scores = []

    def push(self, chunk):
        out = self.fn(chunk)
        self.scores.append(out)  # expect: CG956
''',
        '''
import torch

def solve(model, x, sigmas):
    denoise = torch.compile(model, mode="reduce-overhead")
    old = None
    for s in sigmas:
        out = denoise(x)
        if old is None:
            d = out
        else:
            d = 1.5 * out - 0.5 * old  # expect: CG956
        x = x - s * d
        old = out
    return x
''',
    )
    valid = (
        '''
import torch

def generate(model, tokens, steps):
    step = torch.compile(model, mode="reduce-overhead")
    all_logits = []
    for _ in range(steps):
        logits = step(tokens)
        all_logits.append(logits.clone())
        tokens = logits.argmax(-1)
    return torch.stack(all_logits)
''',
        '''
import torch

@torch.compile(mode="reduce-overhead")
def embed(model, x):
    return model(x)

def compare(model, a, b):
    first = embed(model, a).clone()
    second = embed(model, b)
    return (first - second).abs().max()
''',
        '''
import torch

def embed_all(model, batches):
    encode = torch.compile(model, mode="reduce-overhead")
    out = []
    for x in batches:
        out.append(encode(x).clone())
    return torch.cat(out)
''',
        '''
import torch

def generate(model, tokens, steps):
    step = torch.compile(model, mode="reduce-overhead")
    all_tokens = []
    for _ in range(steps):
        logits = step(tokens)
        tokens = logits[:, -1].argmax(-1)
        all_tokens.append(tokens)
    return all_tokens
''',
    )

    def check(self, node, ctx) -> Iterator[Hit]:
        if isinstance(node, cst.Call):
            yield from self._stored_in_loop(node, ctx)
        elif isinstance(node, cst.Name):
            yield from self._read_after_next_call(node, ctx)

    def _stored_in_loop(self, node: cst.Call, ctx):
        """`kept.append(out)` in a loop that calls the compiled function again."""
        method = call_method(node)
        if method is None or method[1] not in vocabulary.names("memory.stores", "methods") or not node.args:
            return
        stored = positional(node)[-1] if positional(node) else None
        if stored is None:
            return
        loop = next((s for s in ctx.enclosing(node) if isinstance(s, (cst.For, cst.While))), None)
        if loop is None and not ctx.outlives_call(method[0]):
            return
        if loop is not None and _marks_steps(loop, ctx):
            return
        call, capture = _kept_call(stored, ctx)
        if call is None:
            name = _base_name(stored)
            if name is None:
                return
            bound_at, capture = _binding(name, ctx.before(), ctx)
            if capture is None or (loop is not None and not _within(bound_at, loop)):
                return
            call, _ = _compiled_call_in(bound_at, ctx)
            output = code_of(stored)
        else:
            output = code_of(call)
        if call is not None:
            yield Hit(node, {"output": output, "call": code_of(call.func)}, capture)

    def _read_after_next_call(self, node: cst.Name, ctx):
        """`a = f(x); b = f(y); use(a)`: `a` read after a later call of the same function."""
        statement = ctx.statement
        if statement is None or _is_bound_here(node, statement) or _identity_test(node, statement):
            return
        before = ctx.before()
        bound_at, capture = _binding(node.value, before, ctx)
        if capture is None:
            bound_at, capture = None, _carried(node, ctx)
            if capture is None:
                return
        for stmt in before:
            if stmt is bound_at:
                return
            if _marks_steps(stmt, ctx):
                return
            call, other = _compiled_call_in(stmt, ctx)
            if other is capture:
                yield Hit(node, {"output": node.value, "call": code_of(call.func)}, capture)
                return


def _identity_test(node: cst.Name, statement: cst.CSTNode) -> bool:
    """`if old is None:` reads which object the name holds, not the tensor's memory."""
    scope = statement.test if isinstance(statement, (cst.If, cst.While)) else statement
    return any(
        isinstance(n, cst.Comparison) and n.left is node and all(isinstance(c.operator, (cst.Is, cst.IsNot)) for c in n.comparisons)
        for n in (scope, *descendants(scope))
    )


def _carried(node: cst.Name, ctx):
    """`old = out` at the end of a loop's body, where `out = f(x)` earlier in it: read by the
    next iteration (`d = 1.5 * out - 0.5 * old`, a multistep solver), `old` holds the previous
    call's output. The capture of that call, or None."""
    found = nearest_assignment(node.value, ctx.after(node))  # most names are not assigned again
    if found is None:
        return None
    stmt, value = found
    loop = next((s for s in ctx.enclosing(node) if isinstance(s, (cst.For, cst.While))), None)
    if loop is None or not _within(stmt, loop):
        return None
    if isinstance(value, cst.Name):
        _, capture = _binding(value.value, ctx.before(stmt), ctx)
        return capture
    return _compiled_capture(value, ctx)


def _within(stmt: cst.CSTNode, outer: cst.CSTNode) -> bool:
    return any(n is stmt for n in descendants(outer))


def _is_bound_here(node: cst.Name, statement: cst.CSTNode) -> bool:
    """The name is (re)bound by the statement being walked, or is not a plain read in it."""
    if not isinstance(statement, cst.SimpleStatementLine):
        return False
    for small in statement.body:
        if isinstance(small, cst.Assign) and any(node.value in _target_names(t.target) for t in small.targets):
            call = small.value
            return isinstance(call, cst.Call)  # `a = f(a)`: the read happens before the overwrite
    return False


class CompiledCudagraphsSkipped(Rule):
    code = "CG957"
    name = "compiled-cudagraphs-skipped"
    category = "memory"
    severity = "info"
    applies_to = COMPILED
    summary = "Creates CPU tensors or mutates an input in place inside a function compiled with CUDA graphs."
    message = "`{expr}` {reason}; Inductor skips CUDA graphs for this graph (\"skipping cudagraphs due to {cause}\") and it runs as plain kernels"
    fix_hint = "Create tensors on the input's device (`device=x.device`), and return new values instead of writing into arguments."
    why = """`mode="reduce-overhead"` graphs a compiled graph only when it is safe to replay:
    a graph with CPU tensors or one that writes into an input that is not a parameter or a
    buffer is run without CUDA graphs, and PyTorch only says so in a log line
    ("skipping cudagraphs due to cpu device" / "mutated inputs"). Results stay right; the
    launch overhead that CUDA graphs remove comes back. Severity info."""
    nodes = (cst.Call, cst.AugAssign)
    invalid = (
        '''
import torch

@torch.compile(mode="reduce-overhead")
def decode_step(model, x, positions):
    offsets = torch.arange(x.shape[1])  # expect: CG957
    positions.add_(1)  # expect: CG957
    return model(x + offsets.to(x.device))
''',
    )
    valid = (
        '''
import torch

@torch.compile(mode="reduce-overhead")
def decode_step(model, x, positions):
    offsets = torch.arange(x.shape[1], device=x.device)
    return model(x + offsets), positions + 1
''',
    )

    def check(self, node, ctx):
        if isinstance(node, cst.Call):
            if ctx.call_name(node) in vocabulary.names("factories.creation") and ctx.value(node).kind == Kind.CPU_TENSOR:
                yield Hit(node, {"reason": "creates a tensor on the CPU", "cause": "cpu device"})
                return
            method = ctx.method(node)
            if method is not None and _in_place(method[1]) and _argument_of_target(method[0], ctx):
                yield Hit(node, {"reason": f"writes into the argument `{code_of(method[0])}` in place", "cause": "mutated inputs"})
        elif _argument_of_target(node.target, ctx) and ctx.is_tensor(node.target):
            yield Hit(node, {"reason": f"writes into the argument `{code_of(node.target)}` in place", "cause": "mutated inputs"})


def _in_place(method: str) -> bool:
    """`x.clamp_(...)`, `x.copy_(...)`: torch's in-place methods end in one underscore."""
    return method.endswith("_") and not method.startswith("_")


def _argument_of_target(expr: cst.BaseExpression, ctx) -> bool:
    """A tensor parameter of the compiled function itself (parameters and buffers of a module
    are static inputs, which CUDA-graph trees may mutate)."""
    capture = ctx.capture
    if not isinstance(expr, cst.Name) or capture is None or ctx.function not in capture.targets:
        return False
    params = ctx.function.params[1:] if ctx.function.is_method else ctx.function.params
    return expr.value in {p.name.value for p in params} and ctx.maybe_tensor(expr) and ctx.value(expr).kind != Kind.HOST



def _loop_calls(node: cst.Call, ctx):
    """For a call of a compiled function inside a loop: (the innermost loop, the capture)."""
    capture = ctx.compiled_capture(node)
    if capture is None:
        return None, None
    loop = next((s for s in ctx.enclosing(node) if isinstance(s, (cst.For, cst.While))), None)
    return loop, capture


def _arguments(node: cst.Call) -> list:
    return [a.value for a in node.args if not a.star and isinstance(a.value, cst.Name)]


def _assignments_in(loop: cst.CSTNode, name: str) -> Iterator[cst.CSTNode]:
    for inner in descendants(loop):
        if isinstance(inner, cst.Assign) and any(name in _target_names(t.target) for t in inner.targets):
            yield inner.value
        elif isinstance(inner, cst.AugAssign) and isinstance(inner.target, cst.Name) and inner.target.value == name:
            yield inner


class CompiledInputGrows(Rule):
    code = "CG703"
    name = "compiled-input-shape-changes"
    category = "dynamic-shape"
    severity = "info"
    scope = REPLAY
    applies_to = COMPILED
    summary = "Calls a function compiled with CUDA graphs in a loop with a tensor that grows on every call (`x = torch.cat([x, new])`)."
    message = (
        "`{arg}` grows on every call of `{call}` ({growth}); the compiled function is recompiled for the new shape and then "
        "records a new CUDA graph for each size, so every call pays a recording and the memory pool keeps growing"
    )
    fix_hint = "Keep the shapes the compiled function sees fixed: a preallocated buffer with a position (a static KV cache), or a sliding window of constant length; pad to a few bucket sizes otherwise."
    why = """CUDA graphs replay fixed shapes. Given a new input size, a function compiled with
    `mode="reduce-overhead"` is recompiled (after the first change, with dynamic shapes) and
    CUDA-graph trees record one more graph for that size, in the shared memory pool. A
    sequence that grows by one token per call gives every call a new size: it records
    instead of replaying, and the pool grows with the number of sizes seen (PyTorch warns
    after many distinct sizes). Results stay right: severity info."""
    nodes = (cst.Call,)
    invalid = (
        '''
import torch

def generate(model, tokens, steps):
    step = torch.compile(model, mode="reduce-overhead")
    for _ in range(steps):
        logits = step(tokens)  # expect: CG703
        tokens = torch.cat([tokens, logits[:, -1:].argmax(-1)], dim=1)
    return tokens
''',
    )
    valid = (
        '''
import torch

def generate(model, tokens, steps):
    step = torch.compile(model, mode="reduce-overhead")
    for _ in range(steps):
        logits = step(tokens)
        tokens = torch.cat([tokens[:, 1:], logits[:, -1:].argmax(-1)], dim=1)
    return tokens
''',
    )

    def check(self, node, ctx):
        loop, capture = _loop_calls(node, ctx)
        if loop is None:
            return
        for arg in _arguments(node):
            for value in _assignments_in(loop, arg.value):
                if isinstance(value, cst.Call) and ctx.call_name(value) in vocabulary.names("shapes.concatenations"):
                    parts = positional(value)[0] if positional(value) else None
                    if isinstance(parts, (cst.List, cst.Tuple)) and any(isinstance(e.value, cst.Name) and e.value.value == arg.value for e in parts.elements):
                        yield Hit(node, {"arg": arg.value, "call": code_of(node.func), "growth": f"`{code_of(value, limit=60)}`"}, capture)
                        return


class ChangingNumberArgument(Rule):
    code = "CG604"
    name = "changing-number-passed-to-compiled-function"
    category = "frozen-scalar"
    severity = "info"
    scope = REPLAY
    applies_to = COMPILED
    summary = "Passes a Python number that changes on every call (a step counter, a scheduled float) to a function compiled with CUDA graphs."
    message = (
        "`{arg}` is a Python number that changes on every call of `{call}`; Dynamo guards on it, so a new value "
        "recompiles the function, and where the number cannot become dynamic every value does, up to the recompile limit, "
        "after which the function runs eagerly"
    )
    fix_hint = "Pass it as a device tensor updated in place (`lr_t.fill_(lr)`), or keep it out of the compiled function."
    why = """Python numbers given to a compiled function are specialised and guarded. A step
    counter or a float from a schedule differs on every call, so the guard fails: the first
    change recompiles. Dynamo then usually treats the number as dynamic (on an H200 with
    torch 2.11, twelve steps gave two compiled graphs, results right); where it cannot
    (automatic dynamic shapes off, a value that decides a shape or a branch) every new value
    recompiles, up to `torch._dynamo.config.recompile_limit` (8), and then the function runs
    eagerly, without CUDA graphs. Results stay right: severity info."""
    nodes = (cst.Call,)
    invalid = (
        '''
import torch

def train(model, loader, warmup_steps):
    train_step = torch.compile(model.train_step, mode="reduce-overhead")
    step = 0
    for batch in loader:
        step += 1
        lr = 3e-4 * min(1.0, step / warmup_steps)
        loss = train_step(batch, lr)  # expect: CG604
''',
    )
    valid = (
        '''
import torch

def train(model, loader, warmup_steps):
    train_step = torch.compile(model.train_step, mode="reduce-overhead")
    lr_t = torch.zeros((), device="cuda")
    step = 0
    for batch in loader:
        step += 1
        lr_t.fill_(3e-4 * min(1.0, step / warmup_steps))
        loss = train_step(batch, lr_t)
''',
    )

    def check(self, node, ctx):
        loop, capture = _loop_calls(node, ctx)
        if loop is None:
            return
        loop_vars = _target_names(loop.target) if isinstance(loop, cst.For) else set()
        for arg in _arguments(node):
            if ctx.is_tensor(arg) or ctx.value(arg).kind == Kind.OBJECT:
                continue
            changes = arg.value in loop_vars and ctx.value(arg).kind == Kind.HOST or any(
                isinstance(v, cst.AugAssign) and ctx.value(arg).kind == Kind.HOST or _host_number(v, ctx)
                for v in _assignments_in(loop, arg.value)  # `pos += 1` of a number, not of a parameter that may be a tensor
            )
            if changes and not _iterates_tensors(loop, arg.value, ctx):
                yield Hit(arg, {"arg": arg.value, "call": code_of(node.func)}, capture)


def _host_number(value: cst.BaseExpression, ctx) -> bool:
    """A Python number: known to be one, or arithmetic on host numbers and no tensor (`3e-4 * min(1.0, step / warmup)`)."""
    kind = ctx.value(value).kind
    if kind == Kind.HOST:
        return True
    if kind != Kind.UNKNOWN or not isinstance(value, cst.BinaryOperation):
        return False
    leaves = [n for n in descendants(value) if isinstance(n, cst.Name) and not isinstance(n, cst.Call)]
    return not any(ctx.maybe_tensor(n) and ctx.value(n).kind != Kind.UNKNOWN for n in leaves) and any(
        ctx.value(n).kind == Kind.HOST for n in leaves
    )


def _iterates_tensors(loop: cst.CSTNode, name: str, ctx) -> bool:
    """`for batch in loader`: the loop variable is whatever the iterable yields, not a counter."""
    if not isinstance(loop, cst.For) or name not in _target_names(loop.target):
        return False
    return ctx.value(loop.target).kind != Kind.HOST if isinstance(loop.target, cst.Name) else False
