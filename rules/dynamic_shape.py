"""dynamic-shape: sizes in captured code that come from data or change between replays.

A graph records every kernel with the sizes it had at capture. A size read from
tensor data needs a host sync (capture fails), and a size held in host state that
changes later is silently ignored: replays keep computing on the capture-time
extent of the tensors.
"""
from __future__ import annotations

import libcst as cst

from cglint import vocabulary
from cglint.engine.state import Change, fed_by_caller, rebinds, reword
from cglint.engine.syntax import code_of, keyword, positional
from cglint.engine.values import Kind
from cglint.rule import Hit, Rule


def size_arguments(node: cst.CSTNode, ctx) -> list[cst.BaseExpression]:
    """The expressions used as sizes at `node`: slice bounds of a tensor, and the size
    arguments of factories (`torch.zeros(n)`) and shape methods (`x.view(b, n)`)."""
    if isinstance(node, cst.Subscript):
        if not ctx.maybe_tensor(node.value) or ctx.value(node.value).kind == Kind.OBJECT:
            return []
        found = []
        for element in node.slice:
            if isinstance(element.slice, cst.Slice):
                found.extend(p for p in (element.slice.lower, element.slice.upper, element.slice.step) if p is not None)
        return found
    if not isinstance(node, cst.Call):
        return []
    size = keyword(node, "size")
    if ctx.call_name(node) in vocabulary.names("shapes.factories"):
        args = positional(node)
        if ctx.call_name(node) in vocabulary.names("shapes.factories", "ranges") and len(args) >= 2 and _same_state(args[0], args[1], ctx):
            args = args[2:]  # `arange(pos, pos + 1)`: bounds that move together keep the size; the values are CG601's
        return ([size] if size is not None else []) + (args[:1] if ctx.call_name(node) == "torch.full" else args)
    method = ctx.method(node)
    if method is not None and method[1] in vocabulary.names("shapes.methods") and ctx.maybe_tensor(method[0]):
        if ctx.value(method[0]).kind == Kind.TENSOR or method[1] in vocabulary.names("shapes.methods", "any_receiver"):
            args = positional(node)
            return ([size] if size is not None else []) + (args[:1] if method[1] == "topk" else args)
    return []


def _same_state(first: cst.BaseExpression, second: cst.BaseExpression, ctx) -> bool:
    """Whether two bounds read the same host state (`pos` and `pos + 1`)."""
    return bool({code_of(r) for r in ctx.host_reads(first)} & {code_of(r) for r in ctx.host_reads(second)})


def _closure_cell(read: cst.BaseExpression, ctx) -> bool:
    """A variable of the enclosing function (`temperature` in a sampler a factory returned): a
    Python value the closure reads at capture, whatever its kind, and a `nonlocal` setter
    rebinds; the graph keeps the value it had then."""
    return isinstance(read, cst.Name) and ctx.function.parent is not None and not ctx.is_local(read.value)


def changing_number(read: cst.BaseExpression, ctx, operand: bool = False):
    """How a Python number read by captured code changes between replays, or None.

    Only known host values count (an attribute of unknown type may be a tensor updated
    in place). A module global that a function only reassigns is a setting stored once
    at start-up (`def init(tp): global TP; TP = tp`); it counts when it is updated
    (`+=`) or changed in the replay loop."""
    kind = ctx.value(read).kind
    local = read.value if isinstance(read, cst.Subscript) else read  # `opts["scale"]` of a local `opts`
    entry_of_entry = False
    if isinstance(read, cst.Subscript) and isinstance(local, cst.Name) and ctx.is_local(local.value):
        source = ctx.local_source(local)
        if isinstance(source, cst.Attribute):  # `knobs = self.ctx.knobs`, then `knobs["temperature"]`
            read = local = read.with_changes(value=source)
        # `group["lr"]` of `for group in self.param_groups`: that entry of every group, which a
        # scheduler between replays may assign.
        entry_of_entry = isinstance(ctx.iterated(local), (cst.Attribute, cst.Name))
    if kind == Kind.UNKNOWN and isinstance(local, cst.Name) and ctx.is_local(local.value) and not entry_of_entry:
        # A local of unknown kind counts only through what it was computed from: `lr =
        # self.current_lr()` (project functions' results have no kind of their own).
        state = ctx.derived_state(local)
    elif operand and kind == Kind.UNKNOWN and isinstance(read, cst.Attribute) and not _closure_cell(read, ctx):
        # `scores / self.temperature` of unknown kind (a float from `__init__`, an entry of a
        # request's dict from `update(params)`): an operand of tensor arithmetic is a number or
        # a tensor, and rebound between replays to what a caller hands in, the graph keeps the
        # one it read. Not `+=`, which a tensor does in place.
        state = ctx.changing_state(read, any_write=True)
        state = state if isinstance(state, Change) and rebinds(state) and fed_by_caller(state) else None
    elif kind != Kind.HOST and not (kind == Kind.UNKNOWN and (_closure_cell(read, ctx) or isinstance(read, cst.Subscript))):
        # A named entry (`self.hp["scale"]`) assigned between replays is stale in the graph
        # whether it holds a number or a tensor: an assignment replaces the object either way.
        return None
    else:
        state = ctx.changing_state(read, any_write=True)
    if not state:
        return None
    if isinstance(local, cst.Name) and not ctx.is_local(local.value) and "is reassigned in" in state:
        return None
    prefix = f"`{code_of(read)}` "
    text = state.split(prefix, 1)[-1] if prefix in state else state
    return reword(state, text[len("global "):] if text.startswith("global ") else text)


class ShapeFromData(Rule):
    code = "CG701"
    name = "shape-from-tensor-data"
    category = "dynamic-shape"
    severity = "error"
    summary = "Sizes a tensor in captured code from tensor data: `x[:n]` or `torch.empty(n)` with `n` from `.item()`, `int(t)`, or the size of a `nonzero()` result."
    message = "`{expr}` takes its size from tensor data; the host must read that size during capture, which fails (cudaErrorStreamCaptureUnsupported), and a graph cannot change sizes between replays anyway"
    fix_hint = "Use a static size (the maximum) and mask the unused part, e.g. `torch.where(pos < n, x, 0)`; or capture one graph per size bucket."
    why = """A graph fixes every shape at capture. A size that comes from tensor values has to
    be read on the host first (`.item()`, `int(t)`, or the count a `nonzero` syncs), which
    fails capture with error 900; removing only the sync is not enough, because the
    shape itself would have to change from one replay to the next."""
    nodes = (cst.Subscript, cst.Call)
    invalid = (
        '''
import torch

def attend(q, k_cache, lengths):
    n = int(lengths.max())  # expect: CG101
    k = k_cache[:, :n]  # expect: CG701
    return q @ k.transpose(-1, -2)

with torch.cuda.graph(g):
    out = attend(static_q, static_k, static_lengths)
''',
    )
    valid = (
        '''
import torch

def attend(q, k_cache, lengths):
    pos = torch.arange(k_cache.shape[1], device=k_cache.device)
    scores = q @ k_cache.transpose(-1, -2)
    return scores.masked_fill(pos >= lengths[:, None, None], float("-inf"))

with torch.cuda.graph(g):
    out = attend(static_q, static_k, static_lengths)
''',
    )

    def check(self, node, ctx):
        for size in size_arguments(node, ctx):
            if ctx.value(size).data:
                yield node
                return


class StaleHostSize(Rule):
    code = "CG702"
    name = "size-from-changing-host-state"
    category = "dynamic-shape"
    severity = "warning"
    summary = "Slices or sizes tensors in captured code by a host number the code changes between replays (`x[:self.cur_len]`, `buf[:n]` with `n` reassigned)."
    message = "`{expr}` is sized by `{read}`, which {state}; replays keep the size it had at capture"
    fix_hint = "Keep sizes static in the graph (slice to the maximum and mask), or capture one graph per size and pick it before replay()."
    why = """Slicing a static buffer by a host number records the slice's extent into the
    kernels. When the number changes before a later replay, the graph still processes
    the capture-time extent: rows added since are ignored and rows dropped are still
    read, with no error."""
    nodes = (cst.Subscript, cst.Call)
    invalid = (
        '''
import torch

static_x = torch.zeros(64, 16, device="cuda")
n = 8
g = torch.cuda.CUDAGraph()
with torch.cuda.graph(g):
    total = static_x[:n].sum(0)  # expect: CG702

for batch in loader:
    n = batch.shape[0]
    static_x[:n].copy_(batch)
    g.replay()
''',
    )
    valid = (
        '''
import torch

static_x = torch.zeros(64, 16, device="cuda")
g = torch.cuda.CUDAGraph()
with torch.cuda.graph(g):
    total = static_x.sum(0)

for batch in loader:
    n = batch.shape[0]
    static_x.zero_()
    static_x[:n].copy_(batch)
    g.replay()
''',
    )

    def check(self, node, ctx):
        for size in size_arguments(node, ctx):
            if ctx.value(size).data:
                continue  # CG701
            for read in ctx.host_reads(size):
                state = changing_number(read, ctx)
                if state:
                    yield Hit(node, {"read": code_of(read), "state": state})
                    return
