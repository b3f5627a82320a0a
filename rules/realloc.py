"""realloc: address instability of the memory a graph reads and writes.

A graph replays kernels with the pointers they had at capture. New data must be
copied into those same tensors; a tensor that is rebound, reallocated or freed
leaves the graph reading stale (or reused) memory, silently.
"""
from __future__ import annotations

from typing import Optional

import libcst as cst

from cglint import vocabulary
from cglint.engine.syntax import assigned_names, code_of, descendants, named_attribute_write, registers_tensor
from cglint.engine.values import Kind
from cglint.rule import REPLAY, Hit, Rule


def _captured_target(target: cst.BaseExpression, value: Optional[cst.BaseExpression], ctx, tensor: bool = False) -> str:
    """The name or attribute a capture used, if `target` rebinds one (`tensor`: with a tensor)."""
    if isinstance(target, cst.Name) and target.value in ctx.captured_names and ctx.captured_earlier(target.value):
        if ctx.value(target).kind in (Kind.TENSOR, Kind.CPU_TENSOR, Kind.UNKNOWN):
            return target.value
    if ctx.captured_attribute(target) and not _capture_machinery(target, value, ctx):
        return code_of(target)
    if ctx.captured_attribute(target, anywhere=True) and tensor and not _capture_machinery(target, value, ctx):
        return code_of(target)  # a tensor attribute captured code read (`self.inv_freq`); numbers are CG601's
    if _replaces_entry(target, value, ctx):
        return code_of(target)
    return code_of(target) if _replaces_parameter(target, value, ctx) else ""


def _replaces_entry(target: cst.BaseExpression, value: Optional[cst.BaseExpression], ctx) -> bool:
    """`self.static_kwargs[k] = kwargs[k]` of a container the capture used (DeepSpeed's
    `**self.static_kwargs`): the graph keeps the tensor the entry held at capture. A value
    known not to be a tensor (a number, an object) is not new data for the graph."""
    if not isinstance(target, cst.Subscript) or not isinstance(target.value, cst.Attribute) or value is None:
        return False
    if not ctx.captured_attribute(target.value) or _capture_machinery(target, value, ctx):
        return False
    return ctx.value(value).kind in (Kind.TENSOR, Kind.CPU_TENSOR, Kind.UNKNOWN) and not ctx.value(target.value).is_tensor


def _capture_machinery(target: cst.BaseExpression, value: Optional[cst.BaseExpression], ctx) -> bool:
    """`self._active_graph = None` after `capture_end()` (lmdeploy's piecewise runner), or a
    new graph or stream object: a released reference or the objects that run the capture
    feed no new data to what the graph reads."""
    if isinstance(value, cst.Name) and value.value == "None":
        return True
    names = {ctx.value(target).qualname, ctx.call_name(value) if isinstance(value, cst.Call) else None}
    return bool(names & vocabulary.names("realloc.capture_machinery"))


def _replaces_parameter(target: cst.BaseExpression, value: Optional[cst.BaseExpression], ctx) -> bool:
    """`model.fc.weight.data = w` or `model.fc.weight = nn.Parameter(w)` on a module the
    capture used: the graph keeps the old parameter's memory (load new weights with
    `param.copy_(w)` under `torch.no_grad()`)."""
    if not isinstance(target, cst.Attribute):
        return False
    root = target.value
    while isinstance(root, cst.Attribute):
        root = root.value
    if not (isinstance(root, cst.Name) and root.value in ctx.captured_names):
        return False
    return target.attr.value == "data" or (isinstance(value, cst.Call) and (ctx.call_name(value) or "").endswith("Parameter"))


def _kept_by_graph(value) -> str:
    """What the graph holds on to, said for the captured value's kind: a tensor's memory, or a
    Python number baked into the kernels."""
    if value.kind in (Kind.TENSOR, Kind.CPU_TENSOR):
        return "keeps reading and writing the tensor it had at capture"
    if value.kind is Kind.HOST:
        return "baked the value it had at capture into its kernels"
    return "keeps using what it held at capture"


def _derived_from_itself(target: cst.BaseExpression, value: cst.BaseExpression, ctx) -> bool:
    """`x = x.copy_(y)`, `out = (out,)`, `x = x.view(...)`: the new value still holds or aliases
    the captured tensor, so the graph's memory stays reachable (torch's own cudagraphs
    backend wraps its static outputs this way). Reading only its metadata does not
    (`self.x = feats.to(self.x.device)` is a new tensor)."""
    wanted = code_of(target)
    nodes = [value, *descendants(value)]
    metadata = {id(n.value) for n in nodes if isinstance(n, cst.Attribute) and n.attr.value in vocabulary.names("values.host_attributes")}
    return any(
        code_of(node) == wanted for node in nodes if isinstance(node, (cst.Name, cst.Attribute)) and id(node) not in metadata
    )


class RebindCaptured(Rule):
    code = "CG401"
    name = "rebind-captured-tensor"
    category = "realloc"
    severity = "warning"
    scope = REPLAY
    summary = "Rebinds a name or attribute that a capture read or wrote, before a later `replay()`, instead of copying into it."
    message = "`{name}` is rebound after capture; the graph {kept}, so replay ignores the new value"
    fix_hint = "Copy new data into the captured tensor: `{name}.copy_(new_value)`; keep a number the graph reads in a device tensor and `fill_()` it."
    why = """Every replay reads from and writes to the addresses recorded at capture. Binding
    the Python name to a new tensor changes nothing the graph sees: replay computes on
    the old input (or writes an output you no longer look at). No error is raised."""
    fix_safety = (
        "Safe when shapes and dtypes match: `--fix` writes `name.copy_(value)`, which puts the values the "
        "rebinding meant where the graph reads them (a value of another shape now raises instead of being ignored)."
    )
    nodes = (cst.Assign, cst.AnnAssign, cst.Call)
    invalid = (
        '''
import torch

static_x = torch.zeros(8, 16, device="cuda")
g = torch.cuda.CUDAGraph()
with torch.cuda.graph(g):
    static_y = model(static_x)

for batch in loader:
    static_x = batch.cuda()  # expect: CG401
    g.replay()
    consume(static_y)
''',
        '''
import torch

class Runner:
    def __init__(self, model, x):
        self.model = model
        self.graph = torch.cuda.CUDAGraph()
        self.static_x = x.clone()
        with torch.cuda.graph(self.graph):
            self.static_y = model(self.static_x)

    def __call__(self, x):
        self.static_x = x  # expect: CG401
        self.graph.replay()
        return self.static_y
''',
        '''
import torch

class Runner:
    def __init__(self, model, x):
        self.graph = torch.cuda.CUDAGraph()
        self.static_x = x.clone()
        with torch.cuda.graph(self.graph):
            self.static_y = model(self.static_x)

    def _load(self, x):
        self.static_x = x.to(self.static_x.device)  # expect: CG401

    def __call__(self, x):
        self._load(x)
        self.graph.replay()
        return self.static_y.clone()
''',
        '''
import torch

model = load_model()
static_x = torch.zeros(8, 16, device="cuda")
g = torch.cuda.CUDAGraph()
with torch.cuda.graph(g):
    static_y = model(static_x)

for checkpoint in checkpoints:
    model.weight.data = checkpoint["weight"].cuda()  # expect: CG401
    model.bias = torch.nn.Parameter(checkpoint["bias"].cuda())  # expect: CG401
    g.replay()
''',
        '''
import torch
from torch import nn

class Rotary(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.register_buffer("inv_freq", torch.ones(dim // 2))

    def grow(self, base):
        self.register_buffer("inv_freq", 1.0 / base ** torch.arange(0, 1, 0.1, device="cuda"))  # expect: CG401

    def forward(self, t):
        return t[:, None] * self.inv_freq

class Decoder:
    def __init__(self, rotary, t):
        self.rotary = rotary
        self.static_t = t
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self.out = rotary(self.static_t)

    def __call__(self, t, base):
        self.rotary.grow(base)
        self.static_t.copy_(t)
        self.graph.replay()
        return self.out.clone()

decoder = Decoder(Rotary(8).cuda(), torch.zeros(4, device="cuda"))
''',
        '''
import torch

static_x = torch.zeros(8, device="cuda")
with torch.cuda.graph(g):
    y = model(static_x)

for a, b in loader:
    static_x, other = a, b  # expect: CG401
    g.replay()
''',
        '''
import torch

class Engine:
    def _create_cuda_graph(self, *inputs, **kwargs):
        self.graph = torch.cuda.CUDAGraph()
        self.static_inputs, self.static_kwargs = inputs, kwargs
        with torch.cuda.graph(self.graph):
            self.static_output = self.module(*self.static_inputs, **self.static_kwargs)

    def _graph_replay(self, *inputs, **kwargs):
        for k in kwargs:
            self.static_kwargs[k] = kwargs[k]  # expect: CG401
        self.graph.replay()
        return self.static_output
''',
    )
    valid = (
        '''
import torch

static_x = torch.zeros(8, 16, device="cuda")
g = torch.cuda.CUDAGraph()
with torch.cuda.graph(g):
    static_y = model(static_x)

for batch in loader:
    static_x.copy_(batch)
    g.replay()
    consume(static_y)
''',
        '''
import torch

class Engine:
    def capture(self, **kwargs):
        self.graph = torch.cuda.CUDAGraph()
        self.static_kwargs = kwargs
        with torch.cuda.graph(self.graph):
            self.static_output = self.module(**self.static_kwargs)

    def replay(self, **kwargs):
        for k in kwargs:
            self.static_kwargs[k].copy_(kwargs[k])
        self.static_kwargs["step"] = None
        self.graph.replay()
        return self.static_output
''',
    )
    fixed = (
        '''
import torch

static_x = torch.zeros(8, 16, device="cuda")
g = torch.cuda.CUDAGraph()
with torch.cuda.graph(g):
    static_y = model(static_x)

for batch in loader:
    static_x.copy_(batch.cuda())
    g.replay()
    consume(static_y)
''',
        '''
import torch

class Runner:
    def __init__(self, model, x):
        self.model = model
        self.graph = torch.cuda.CUDAGraph()
        self.static_x = x.clone()
        with torch.cuda.graph(self.graph):
            self.static_y = model(self.static_x)

    def __call__(self, x):
        self.static_x.copy_(x)
        self.graph.replay()
        return self.static_y
''',
        '''
import torch

class Runner:
    def __init__(self, model, x):
        self.graph = torch.cuda.CUDAGraph()
        self.static_x = x.clone()
        with torch.cuda.graph(self.graph):
            self.static_y = model(self.static_x)

    def _load(self, x):
        self.static_x.copy_(x.to(self.static_x.device))

    def __call__(self, x):
        self._load(x)
        self.graph.replay()
        return self.static_y.clone()
''',
        '''
import torch

model = load_model()
static_x = torch.zeros(8, 16, device="cuda")
g = torch.cuda.CUDAGraph()
with torch.cuda.graph(g):
    static_y = model(static_x)

for checkpoint in checkpoints:
    model.weight.data.copy_(checkpoint["weight"].cuda())
    model.bias.copy_(torch.nn.Parameter(checkpoint["bias"].cuda()))
    g.replay()
''',
        None,
        None,
        '''
import torch

class Engine:
    def _create_cuda_graph(self, *inputs, **kwargs):
        self.graph = torch.cuda.CUDAGraph()
        self.static_inputs, self.static_kwargs = inputs, kwargs
        with torch.cuda.graph(self.graph):
            self.static_output = self.module(*self.static_inputs, **self.static_kwargs)

    def _graph_replay(self, *inputs, **kwargs):
        for k in kwargs:
            self.static_kwargs[k].copy_(kwargs[k])
        self.graph.replay()
        return self.static_output
''',
    )

    def check(self, node, ctx):
        if ctx.first_call_only:
            return  # `if self.static_x is None: self.static_x = x.clone()`: bound before the capture
        if isinstance(node, cst.Call):  # `self.register_buffer("inv_freq", new)`, `setattr(obj, "x", t)`
            target = named_attribute_write(node)
            name = _captured_target(target, node.args[-1].value, ctx, tensor=registers_tensor(node)) if target is not None else ""
            if name and ctx.replay_follows():
                yield Hit(node, {"name": name, "kept": _kept_by_graph(ctx.value(target))}, capture=ctx.capture_using(target))
            return
        targets = [t.target for t in node.targets] if isinstance(node, cst.Assign) else [node.target]
        for target in targets:
            for leaf in assigned_names(target):
                name = _captured_target(leaf, node.value, ctx, tensor=ctx.value(node.value).is_tensor or ctx.value(leaf).is_tensor)
                if name and not _derived_from_itself(leaf, node.value, ctx) and ctx.replay_follows():
                    yield Hit(leaf, {"name": name, "kept": _kept_by_graph(ctx.value(leaf))}, capture=ctx.capture_using(leaf))

    def fix(self, node, ctx):
        # `static_x = batch` -> `static_x.copy_(batch)`, when the statement rebinds only this name.
        owner = ctx.parent(node)
        statement = ctx.parent(owner) if isinstance(owner, cst.AssignTarget) else owner
        if (isinstance(statement, cst.Assign) and len(statement.targets) == 1 and statement.targets[0].target is node) or (
            isinstance(statement, cst.AnnAssign) and statement.target is node and statement.value is not None
        ):
            value = statement.value
        else:
            return None
        if isinstance(value, (cst.Tuple, cst.List, cst.Dict, cst.Set, cst.BaseNumber, cst.BaseString, cst.Lambda)):
            return None  # not a tensor: copy_ would raise where the assignment did not
        if isinstance(value, cst.Name) and value.value in ("None", "True", "False"):
            return None
        copy = cst.Call(cst.Attribute(node, cst.Name("copy_")), [cst.Arg(value)])
        return {statement: cst.Expr(copy, semicolon=statement.semicolon)}


class HostToDevice(Rule):
    code = "CG402"
    name = "host-to-device-in-capture"
    category = "realloc"
    severity = "error"
    summary = "Creates a device tensor from host data inside a captured region: `torch.tensor(..., device=\"cuda\")`, `.cuda()` of a host tensor."
    message = "`{expr}` copies host data to the device during capture; PyTorch refuses unpinned CPU-to-CUDA copies while capturing, and a pinned one would replay the host buffer's contents at that moment"
    fix_hint = "Allocate the device tensor before capture and `copy_()` new values into it before each replay."
    why = """A host-to-device copy inside capture either fails ("Cannot copy between CPU and
    CUDA tensors during CUDA graph capture unless the CPU tensor is pinned") or, with
    pinned memory, records a copy from a host buffer that must stay alive and
    unchanged. Values built from Python lists at capture are frozen into the graph."""
    nodes = (cst.Call,)
    invalid = (
        '''
import torch

def positions(x, offsets):
    pos = torch.tensor(offsets, device="cuda")  # expect: CG402
    return x + pos

with torch.cuda.graph(g):
    out = positions(static_x, [0, 1, 2, 3])
''',
    )
    valid = (
        '''
import torch

static_pos = torch.tensor([0, 1, 2, 3], device="cuda")

def positions(x, pos):
    return x + pos

with torch.cuda.graph(g):
    out = positions(static_x, static_pos)
    ramp = torch.arange(4, device=static_x.device)
''',
    )

    def check(self, node, ctx):
        name = ctx.call_name(node)
        if name in vocabulary.names("realloc.from_host_data", "functions") and ctx.is_device_tensor(node):
            yield node
            return
        method = ctx.method(node)
        if method is None:
            return
        receiver, method_name = method
        value = ctx.value(receiver)
        if value.kind != Kind.CPU_TENSOR or value.random:  # random host tensors: CG303
            return
        if method_name == "cuda" or (method_name == "to" and ctx.to_device(node) == "device"):
            yield node


class ResizeInCapture(Rule):
    code = "CG403"
    name = "resize-in-capture"
    category = "realloc"
    severity = "info"
    summary = "Resizes a tensor (`resize_`, `resize_as_`) inside a captured region."
    message = "`{expr}` may reallocate the tensor's storage during capture; replays keep using the memory recorded at capture"
    fix_hint = "Allocate tensors at their final size before capture."
    why = """Growing a tensor allocates new storage from the graph's private pool; tensors
    outside the graph that still hold the old storage (or copies made before replay)
    no longer alias what the graph writes. On torch 2.11 (H100) the resized tensor itself
    held the replayed values afterwards, so this is info: only other references to the
    old storage go stale."""
    nodes = (cst.Call,)
    invalid = (
        '''
import torch

def gather_into(out, x):
    out.resize_(x.shape)  # expect: CG403
    out.copy_(x)

with torch.cuda.graph(g):
    gather_into(static_out, static_x)
''',
    )
    valid = (
        '''
import torch

static_out = torch.empty_like(static_x)

def gather_into(out, x):
    out.copy_(x)

with torch.cuda.graph(g):
    gather_into(static_out, static_x)
''',
    )

    def check(self, node, ctx):
        method = ctx.method(node)
        if method is not None and method[1] in vocabulary.names("realloc.resize", "methods") and ctx.maybe_tensor(method[0]):
            yield node


class DeleteCaptured(Rule):
    code = "CG404"
    name = "delete-captured-tensor"
    category = "realloc"
    severity = "warning"
    scope = REPLAY
    summary = "Deletes (`del`) a tensor a capture used, before a later `replay()`."
    message = "`del {name}` drops a tensor the graph still reads or writes; its memory can be reused while replays keep using it"
    fix_hint = "Keep captured tensors alive as long as the graph is replayed (hold them on the runner object)."
    why = """The graph holds raw addresses, not references. Once the last Python reference
    is gone the caching allocator may hand the memory to another tensor, and the next
    replay reads or overwrites that tensor's data."""
    nodes = (cst.Del,)
    invalid = (
        '''
import torch

static_x = torch.zeros(8, device="cuda")
with torch.cuda.graph(g):
    static_y = static_x * 2

del static_x  # expect: CG404
for _ in range(10):
    g.replay()
''',
    )
    valid = (
        '''
import torch

static_x = torch.zeros(8, device="cuda")
with torch.cuda.graph(g):
    static_y = static_x * 2

for _ in range(10):
    g.replay()
del static_x, static_y, g
''',
    )

    def check(self, node, ctx):
        for leaf in assigned_names(node.target):
            name = _captured_target(leaf, None, ctx)
            if name and ctx.value(leaf).kind is not Kind.HOST and ctx.replay_follows():  # a number holds no memory
                yield Hit(node, {"name": name}, capture=ctx.capture_using(leaf))
                return
