"""memory (CG95x): what a capture costs in memory, and outputs that do not survive replays.

Private pools per capture, the order in which a shared pool is filled, empty_cache
around captures, and static outputs kept across replays.
"""
from __future__ import annotations

from typing import Optional

import libcst as cst

from cglint import vocabulary
from cglint.engine.captures import capture_method
from cglint.engine.syntax import call_method, calls_in, code_of, descendants, is_true, keyword, nearest_assignment, positional
from cglint.engine.values import Kind, output_root
from cglint.rule import CAPTURE, REPLAY, Hit, Rule

def _capture_call(node: cst.CSTNode) -> Optional[cst.Call]:
    """The call that opens the capture at a site: the `with` item, or capture_begin()."""
    if isinstance(node, cst.With):
        item = node.items[0].item
        return item if isinstance(item, cst.Call) else None
    return node if isinstance(node, cst.Call) else None


def _pool_given(call: cst.Call, ctx) -> Optional[bool]:
    """True/False whether the capture shares a pool; None when it cannot be told (a helper without `pool`)."""
    if keyword(call, "pool") is not None:
        return True
    name = ctx.call_name(call)
    if name in vocabulary.names("capture.graph_context"):
        return len(positional(call)) >= 2
    if capture_method(call) == "begin":
        return bool(positional(call))
    helpers = [t for t in ctx.value(call.func).targets if hasattr(t, "params")]
    if helpers and any(p.name.value == "pool" for p in helpers[0].params):
        return False
    return None


def _loop(node: cst.CSTNode, ctx) -> Optional[cst.CSTNode]:
    for outer in ctx.enclosing(node):
        if isinstance(outer, (cst.For, cst.While)):
            return outer
    return None


class CapturesWithoutSharedPool(Rule):
    code = "CG951"
    name = "captures-without-shared-pool"
    category = "memory"
    severity = "info"
    summary = "Captures graphs in a loop (one per batch size) without a shared `pool=`."
    message = "each capture in this loop gets its own private memory pool; `{expr}` reserves memory per graph that sequentially replayed graphs could share"
    fix_hint = "Share one pool: `pool = torch.cuda.graph_pool_handle()` before the loop and `torch.cuda.graph(g, pool=pool)` (capture the largest size first)."
    why = """Every capture without `pool=` allocates a private memory pool that stays reserved
    as long as its graph lives. Graphs that are replayed one at a time (one per batch
    size) can share a pool, which keeps reserved memory near the largest graph instead of
    the sum of all of them."""
    scope = CAPTURE
    nodes = (cst.With, cst.Call)
    invalid = (
        '''
import torch

graphs = {}
for bs in (64, 32, 16, 8):
    graphs[bs] = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graphs[bs]):  # expect: CG951
        outputs[bs] = static_x[:bs] * 2
''',
    )
    valid = (
        '''
import torch

graphs = {}
pool = torch.cuda.graph_pool_handle()
for bs in (64, 32, 16, 8):
    graphs[bs] = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graphs[bs], pool=pool):
        outputs[bs] = static_x[:bs] * 2
''',
    )

    def check(self, node, ctx):
        call = _capture_call(node)
        if call is not None and _loop(node, ctx) is not None and _pool_given(call, ctx) is False:
            yield Hit(node, {"expr": code_of(call)})


def _order(iterable: cst.BaseExpression, ctx) -> str:
    """'ascending', 'descending' or '' for the values a for loop goes over."""
    if isinstance(iterable, cst.Call):
        name = ctx.call_name(iterable)
        if name == "reversed":
            return "descending"
        if name == "sorted":
            return "descending" if is_true(keyword(iterable, "reverse")) else "ascending"
        if name == "range":
            step = positional(iterable)[2] if len(positional(iterable)) > 2 else None
            return "descending" if step is not None and code_of(step).startswith("-") else "ascending"
        return ""
    if isinstance(iterable, cst.Subscript):
        return ""
    values = ctx.value(iterable).const
    if isinstance(values, tuple) and len(values) > 1 and all(isinstance(v, (int, float)) for v in values):
        if list(values) == sorted(values):
            return "ascending"
    return ""


class AscendingSharedPool(Rule):
    code = "CG952"
    name = "shared-pool-captured-smallest-first"
    category = "memory"
    severity = "info"
    summary = "Captures graphs that share a pool from the smallest size up."
    message = "graphs sharing `pool=` are captured in ascending size order (`{loop}`); each larger capture cannot reuse the smaller ones' blocks, so the pool grows toward the sum of all sizes"
    fix_hint = "Capture the largest size first: `for bs in sorted(sizes, reverse=True):`."
    why = """A shared pool can hand a later capture the blocks an earlier capture freed, but
    only blocks that are large enough. Captured largest first, every smaller graph fits
    into memory the first one reserved; captured smallest first, each capture needs
    bigger blocks than any before it and the pool keeps growing (serving engines such as
    SGLang and TensorRT-LLM capture in reverse for this reason)."""
    scope = CAPTURE
    nodes = (cst.With, cst.Call)
    invalid = (
        '''
import torch

pool = torch.cuda.graph_pool_handle()
graphs = {}
for bs in [1, 2, 4, 8, 16, 32]:  # expect: CG952
    graphs[bs] = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graphs[bs], pool=pool):
        outputs[bs] = model(static_x[:bs])
''',
    )
    valid = (
        '''
import torch

pool = torch.cuda.graph_pool_handle()
graphs = {}
for bs in reversed([1, 2, 4, 8, 16, 32]):
    graphs[bs] = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graphs[bs], pool=pool):
        outputs[bs] = model(static_x[:bs])
''',
        '''
import torch

pool = torch.cuda.graph_pool_handle()
graphs = []
for layer_no in range(num_layers):  # one graph per layer, all of one shape
    graphs.append(torch.cuda.CUDAGraph())
    with torch.cuda.graph(graphs[-1], pool=pool):
        static_outs[layer_no] = layers[layer_no](static_x)
''',
    )

    def check(self, node, ctx):
        call = _capture_call(node)
        loop = _loop(node, ctx)
        if call is None or not isinstance(loop, cst.For) or not _pool_given(call, ctx):
            return
        if _order(loop.iter, ctx) == "ascending" and _sizes(loop, ctx):
            yield Hit(loop, {"loop": f"for {code_of(loop.target)} in {code_of(loop.iter)}"})


def _sizes(loop: cst.For, ctx) -> bool:
    """Whether the loop goes over sizes: its variable bounds a slice (`static_x[:bs]`) or sizes a
    new tensor (`torch.zeros(bs, dim)`). `for l_no in range(num_layers)` (Transformer Engine's
    per-layer captures) numbers graphs of one shape: their order costs nothing."""
    if not isinstance(loop.iter, cst.Call) or ctx.call_name(loop.iter) != "range":
        return True  # a list or sorted() of numbers: sizes, as serving engines write them
    if not isinstance(loop.target, cst.Name):
        return False
    name = loop.target.value
    for node in descendants(loop.body):
        if isinstance(node, cst.Slice) and any(
            part is not None and name in {n.value for n in (part, *descendants(part)) if isinstance(n, cst.Name)}
            for part in (node.lower, node.upper)
        ):
            return True
        if isinstance(node, cst.Call) and (ctx.call_name(node) or "").startswith("torch.") and any(
            isinstance(a, cst.Name) and a.value == name for a in positional(node)
        ):
            return True
    return False


class EmptyCacheInCapture(Rule):
    code = "CG953"
    name = "empty-cache-in-capture"
    category = "memory"
    severity = "info"
    summary = "Calls `torch.cuda.empty_cache()` inside captured code."
    message = "`{expr}` runs once, at capture, and frees nothing the graph uses; releasing memory with cudaFree while capturing is forbidden by CUDA"
    fix_hint = "Call empty_cache() before capture (or not at all); the graph's pool is managed by the capture."
    why = """empty_cache returns unused cached blocks to the driver with cudaFree, which CUDA
    does not allow while a capture is in progress. On torch 2.11 (H100) the call inside a
    capture was accepted (the allocator leaves memory alone while capturing), so this is
    info: it does nothing useful there and belongs before the capture."""
    nodes = (cst.Call,)
    invalid = (
        '''
import torch

def step(model, x):
    out = model(x)
    torch.cuda.empty_cache()  # expect: CG953
    return out

with torch.cuda.graph(g):
    static_out = step(model, static_x)
''',
    )
    valid = (
        '''
import torch

def step(model, x):
    return model(x)

torch.cuda.empty_cache()
with torch.cuda.graph(g):
    static_out = step(model, static_x)
''',
    )

    def check(self, node, ctx):
        if ctx.call_name(node) in vocabulary.names("memory.empty_cache"):
            yield node


class EmptyCacheBetweenPooledCaptures(Rule):
    code = "CG954"
    name = "empty-cache-between-pooled-captures"
    category = "memory"
    severity = "info"
    summary = "Calls `torch.cuda.empty_cache()` in a loop of captures that share a pool."
    message = "`{expr}` between captures that share a pool returns the cached blocks the next capture could have reused; every capture allocates afresh"
    fix_hint = "Call empty_cache() once, before the capture loop."
    why = """Captures sharing a pool reuse blocks that earlier captures freed. Emptying the
    cache between them hands free memory back to the driver, so the next capture pays
    for new cudaMalloc calls and fragmentation instead of reusing memory (and slows
    capture down)."""
    scope = CAPTURE
    nodes = (cst.With, cst.Call)
    invalid = (
        '''
import torch

pool = torch.cuda.graph_pool_handle()
for bs in (32, 16, 8):
    torch.cuda.empty_cache()  # expect: CG954
    with torch.cuda.graph(graphs[bs], pool=pool):
        outs[bs] = model(static_x[:bs])
''',
    )
    valid = (
        '''
import torch

pool = torch.cuda.graph_pool_handle()
torch.cuda.empty_cache()
for bs in (32, 16, 8):
    with torch.cuda.graph(graphs[bs], pool=pool):
        outs[bs] = model(static_x[:bs])
''',
    )

    def check(self, node, ctx):
        call = _capture_call(node)
        loop = _loop(node, ctx)
        if call is None or loop is None or not _pool_given(call, ctx):
            return
        for inner in calls_in(loop.body.body):
            if ctx.call_name(inner) in vocabulary.names("memory.empty_cache"):
                yield inner


def _static_output(expr: cst.BaseExpression, outputs: set) -> Optional[str]:
    """The captured output `expr` still aliases: `y`, `y[:n]`, `y.view(...)`, `y.detach()`."""
    root = output_root(expr)
    return root.value if isinstance(root, cst.Name) and root.value in outputs else None


class CaptureLoopOutputRebound(Rule):
    code = "CG958"
    name = "capture-loop-output-rebound"
    category = "memory"
    severity = "warning"
    summary = "Captures graphs in a loop and binds each one's output to the same name, so only the last graph's output is kept."
    message = "`{name}` is bound to this graph's output on every pass of the capture loop; it keeps only the last graph's output, so code that reads it after replaying an earlier graph gets another graph's values"
    fix_hint = "Keep each graph's outputs with the graph: `outputs[bs] = model(static_x[:bs])`, and read `outputs[bs]` after `graphs[bs].replay()`."
    why = """A captured graph writes its outputs to the addresses they had at capture. When
    a loop captures one graph per size and assigns each output to the same variable, the
    name ends up holding the last graph's output only: replaying an earlier graph updates a
    tensor nobody can read, and code that reads the variable after it gets another graph's
    values (on an H200, replaying the bs=4 graph and reading the variable differed from eager
    by 0.56; keeping each output with its graph matched). With a shared `pool=`, the dropped
    output's memory also goes back to the pool for the next capture."""
    scope = CAPTURE
    nodes = (cst.With,)
    invalid = (
        '''
import torch

pool = torch.cuda.graph_pool_handle()
graphs = {}
for bs in (8, 4, 2, 1):
    graphs[bs] = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graphs[bs], pool=pool):
        static_out = model(static_x[:bs])  # expect: CG958

graphs[2].replay()
print(static_out[:2])
''',
    )
    valid = (
        '''
import torch

pool = torch.cuda.graph_pool_handle()
graphs, outputs = {}, {}
for bs in (8, 4, 2, 1):
    graphs[bs] = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graphs[bs], pool=pool):
        outputs[bs] = model(static_x[:bs])

graphs[2].replay()
print(outputs[2])
''',
        '''
import torch

pool = torch.cuda.graph_pool_handle()
graphs, outputs = {}, {}
for bs in (8, 4, 2, 1):
    graphs[bs] = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graphs[bs], pool=pool):
        out = model(static_x[:bs])
    outputs[bs] = out  # kept per graph after the block
''',
    )

    def check(self, node, ctx):
        call = _capture_call(node)
        loop = _loop(node, ctx)
        if call is None or loop is None:
            return
        kept = _kept_in(loop)
        graph = (positional(call) or [None])[0]
        if isinstance(graph, cst.Name) and graph.value not in kept | _loop_targets(loop):
            return  # one graph per pass, replayed and dropped in the pass: its output is read there
        read_later = set().union(*(_names(s) for s in ctx.after(loop)))
        for statement in node.body.body:
            if not isinstance(statement, cst.SimpleStatementLine):
                continue
            for small in statement.body:
                if not isinstance(small, cst.Assign) or ctx.value(small.value).kind not in (Kind.TENSOR, Kind.UNKNOWN):
                    continue
                for target in (t.target for t in small.targets):
                    # An attribute outlives the loop (a runner's `self.static_out`); a local
                    # counts when code after the loop reads it (not a temporary of the block).
                    if isinstance(target, cst.Attribute) and code_of(target) not in kept:
                        name = code_of(target)
                    elif isinstance(target, cst.Name) and target.value not in kept and target.value in read_later:
                        name = target.value
                    else:
                        continue
                    yield Hit(small, {"name": name})
                    return


def _names(node: cst.CSTNode) -> set[str]:
    return {n.value for n in (node, *descendants(node)) if isinstance(n, cst.Name)}


def _loop_targets(loop: cst.CSTNode) -> set[str]:
    return _names(loop.target) if isinstance(loop, cst.For) else set()


def _kept_in(loop: cst.CSTNode) -> set[str]:
    """Names whose values the loop body stores per pass (`outputs[bs] = out`, `outs.append(out)`,
    `self.outputs[bs] = out`), also through names computed from them (Transformer Engine's
    `flat, spec = _tree_flatten(outputs)` before `static_outputs[i] = tuple(flat)`)."""
    kept: set[str] = set()
    keeping = vocabulary.names("memory.stores", "methods") | vocabulary.names("memory.stores", "dict_methods")
    flows: list[tuple[set[str], set[str]]] = []  # (names assigned, names they are computed from)
    for node in descendants(loop.body):
        if isinstance(node, cst.Assign):
            if any(isinstance(t.target, cst.Subscript) for t in node.targets):
                kept |= _names(node.value) | {code_of(n) for n in (node.value, *descendants(node.value)) if isinstance(n, cst.Attribute)}
            flows.append((set().union(*(_names(t.target) for t in node.targets)), _names(node.value)))
        elif isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and node.func.attr.value in keeping:
            kept |= set().union(*(_names(a.value) for a in node.args))
    changed = True
    while changed:
        changed = False
        for targets, sources in flows:
            if targets & kept and not sources <= kept:
                kept |= sources
                changed = True
    return kept


class OutputKeptAcrossReplays(Rule):
    code = "CG955"
    name = "static-output-kept-across-replays"
    category = "memory"
    severity = "warning"
    summary = "Keeps a captured output tensor (or a view of it) in a container across replays instead of a `.clone()`."
    message = "`{expr}` keeps a reference to the graph's static output `{name}`; the next replay overwrites it, so every kept entry ends up holding the last result"
    fix_hint = "Store a copy: `{name}.clone()` (or copy into your own buffer)."
    why = """A graph writes its outputs into the same memory on every replay. Appending the
    output tensor itself (or a view of it) to a list keeps a reference to that memory, not
    to the values: after the loop all entries show the last replay's result. The same holds
    for a graph runner's output (`self.static_logits` bound in its capture, returned by its
    `run()`), kept by code that calls the runner again."""
    fix_safety = "Safe: `.clone()` stores the values the code meant to keep."
    scope = REPLAY
    nodes = (cst.Call, cst.Assign, cst.ListComp)
    invalid = (
        '''
import torch

static_x = torch.zeros(8, device="cuda")
g = torch.cuda.CUDAGraph()
with torch.cuda.graph(g):
    static_y = static_x * 2

results = []
for batch in loader:
    static_x.copy_(batch)
    g.replay()
    results.append(static_y)  # expect: CG955
''',
        '''
import torch


class GraphRunner:
    def __init__(self, model, example):
        self.static_x = example.clone()
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self.static_logits = model(self.static_x)

    def run(self, x):
        self.static_x.copy_(x)
        self.graph.replay()
        return self.static_logits


def evaluate(runner, batches):
    logits = []
    for x in batches:
        logits.append(runner.run(x))  # expect: CG955
    return logits


def score(runner, batches):
    return [runner.run(x) for x in batches]  # expect: CG955
''',
    )
    valid = (
        '''
import torch

static_x = torch.zeros(8, device="cuda")
g = torch.cuda.CUDAGraph()
with torch.cuda.graph(g):
    static_y = static_x * 2

results = []
for batch in loader:
    static_x.copy_(batch)
    g.replay()
    results.append(static_y.clone())
''',
        '''
import torch


class GraphRunner:
    def __init__(self, model, example):
        self.static_x = example.clone()
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self.static_logits = model(self.static_x)

    def run(self, x):
        self.static_x.copy_(x)
        self.graph.replay()
        return self.static_logits


def evaluate(runner, batches):
    logits, preds = [], []
    for x in batches:
        out = runner.run(x)
        logits.append(out.clone())
        preds.append(out.argmax(dim=-1))
    return logits, preds
''',
    )

    def check(self, node, ctx):
        if isinstance(node, cst.ListComp):
            # `[runner.run(x) for x in batches]`: each element is the runner's output, which the
            # next element's call overwrites.
            capture = ctx.runner_output(node.elt, node)
            if capture is not None and not ctx.value(node.elt).is_host and _runs_again(node, ctx):
                yield Hit(node, {"name": code_of(output_root(node.elt))}, capture=capture)
            return
        if isinstance(node, cst.Call):
            method = ctx.method(node)
            if method is not None and method[1] in vocabulary.names("memory.stores", "methods"):
                stored = [a.value for a in node.args]
            else:
                stored = _kept_arguments(node, ctx)  # `state.collect(out)`, which appends it to a list on self
        else:
            if not any(isinstance(t.target, cst.Subscript) for t in node.targets):
                return
            stored = [node.value]
        outputs, loop = ctx.captured_outputs, _loop(node, ctx)
        for value in stored:
            if ctx.value(value).is_host:
                continue
            name = _static_output(value, outputs)
            if name is not None and ctx.replay_follows():
                yield Hit(node, {"name": name}, capture=ctx.capture_using(name))
                return
            # A graph runner's output (`runner.static_y`, `runner.run(x)`) kept in a loop
            # that runs the runner again.
            source = _bound_value(value, loop, ctx) if isinstance(value, cst.Name) else value
            capture = ctx.runner_output(source, loop) if source is not None and loop is not None else None
            if capture is not None and _runs_again(loop, ctx):
                yield Hit(node, {"name": code_of(output_root(source))}, capture=capture)
                return
            # `self.frames.append(self.enc_out)` in the runner's own replaying method: each call
            # replays and keeps the output in a container that outlives the call.
            if isinstance(node, cst.Call) and method is not None and ctx.outlives_call(method[0]) and _replays_here(ctx):
                capture = ctx.runner_output(value, None)
                if capture is not None:
                    yield Hit(node, {"name": code_of(output_root(value))}, capture=capture)
                    return


def _replays_here(ctx) -> bool:
    """The current function is a graph runner's replaying method."""
    return any(m is ctx.function for methods in ctx.runner_methods().values() for m in methods)


def _kept_arguments(call: cst.Call, ctx) -> list[cst.BaseExpression]:
    """The arguments of a call to a project method that keeps them: it stores the parameter
    in a container on `self` (`def collect(self, post): self.posteriors.append(post)`)."""
    return [expr for function, name, expr in ctx.call_arguments(call) if name in _kept_parameters(function, ctx)]


def _kept_parameters(function, ctx) -> set[str]:
    if not function.is_method or not function.params:
        return set()
    if function.outline is not None and function.outline.facts.called.isdisjoint(vocabulary.names("memory.stores", "methods")):
        return set()  # stores nothing: its body need not be parsed (every call of a replay loop asks)
    this, params = function.params[0].name.value, {p.name.value for p in function.params[1:]}
    kept = set()
    for node in descendants(function.node):
        method = call_method(node) if isinstance(node, cst.Call) else None
        if method is None or method[1] not in vocabulary.names("memory.stores", "methods"):
            continue
        receiver = method[0]
        if isinstance(receiver, cst.Attribute) and isinstance(receiver.value, cst.Name) and receiver.value.value == this:
            kept.update(a.value.value for a in node.args if isinstance(a.value, cst.Name) and a.value.value in params)
    return kept


def _bound_value(name: cst.Name, loop: cst.CSTNode, ctx) -> Optional[cst.BaseExpression]:
    """What the nearest earlier statement of the loop assigned to `name` (`out = runner.run(x)`)."""
    found = nearest_assignment(name.value, ctx.before())
    return found[1] if found is not None and any(n is found[0] for n in descendants(loop)) else None


def _runs_again(loop: cst.CSTNode, ctx) -> bool:
    """Whether the loop replays: replay(), or a method of a graph runner."""
    names = set(ctx.runner_methods())
    return any(
        isinstance(n, cst.Call) and (capture_method(n) == "replay" or (ctx.method(n) or (None, ""))[1] in names or ctx.runner_output(n, loop) is not None)
        for n in descendants(loop)
    )
