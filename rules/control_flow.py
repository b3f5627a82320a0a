"""control-flow: Python branches and loops decided by data or by state that changes between replays.

A graph records one path. A branch on tensor data must read the data on the host
(a sync, so capture fails); a branch on host state is decided once at capture and
replayed forever, whatever the state becomes.
"""
from __future__ import annotations

import libcst as cst

from cglint.engine.syntax import reads
from cglint.rule import Hit, Rule


def conditions(node: cst.CSTNode) -> list[cst.BaseExpression]:
    """The expressions whose truth decides the path at `node`."""
    if isinstance(node, (cst.If, cst.While, cst.IfExp)):
        return [node.test]
    if isinstance(node, cst.Assert):
        return [node.test]
    if isinstance(node, cst.CompIf):
        return [node.test]
    if isinstance(node, cst.BooleanOperation):
        return [node.left]  # `a and b` tests `a`; `b` is tested by its own context
    return []


def operands(expr: cst.BaseExpression, ctx=None) -> list[cst.BaseExpression]:
    """Split `a and not b` into the parts whose truth is taken. With `ctx`, a part that a known
    left side short-circuits is left out (`not torch.compiler.is_compiling() and x.sum() > 0`
    in compiled code never evaluates the tensor test)."""
    if isinstance(expr, cst.BooleanOperation):
        known = ctx.truth(expr.left) if ctx is not None else None
        if known is not None and known == isinstance(expr.operator, cst.Or):
            return operands(expr.left, ctx)
        return operands(expr.left, ctx) + operands(expr.right, ctx)
    if isinstance(expr, cst.UnaryOperation) and isinstance(expr.operator, cst.Not):
        return operands(expr.expression, ctx)
    return [expr]


_NODES = (cst.If, cst.While, cst.IfExp, cst.Assert, cst.CompIf, cst.BooleanOperation)


class TensorCondition(Rule):
    code = "CG201"
    name = "tensor-dependent-branch"
    category = "control-flow"
    severity = "error"
    summary = "Branches or loops on tensor data: `if`, `while`, ternaries, `assert`, comprehension filters, `and`/`or`."
    message = "`{expr}` decides a Python branch from tensor data, which reads it on the host; capture fails (cudaErrorStreamCaptureUnsupported)"
    fix_hint = "Compute both outcomes and select with `torch.where`, or use `torch.cond`; move checks after replay()."
    why = """Python needs a bool to choose a branch, so a condition on a tensor calls
    `bool(tensor)`: a device-to-host copy and a synchronize, which fails capture (900).
    Had it been capturable, the branch taken at capture would replay forever."""
    nodes = _NODES
    invalid = (
        '''
import torch

def update(param, grad, lr):
    norm = grad.norm()
    if norm > 1.0:  # expect: CG201
        grad = grad / norm
    param.add_(grad, alpha=-lr)

with torch.cuda.graph(g):
    update(static_param, static_grad, 0.1)
''',
        '''
import torch

def refine(x, eps):
    while (x * x).sum() > eps:  # expect: CG201
        x = x * 0.5
    return x

with torch.cuda.graph(g):
    y = refine(static_x, 1e-3)
''',
    )
    valid = (
        '''
import torch

def update(param, grad, lr):
    norm = grad.norm()
    scale = torch.where(norm > 1.0, 1.0 / norm, torch.ones_like(norm))
    param.add_(grad * scale, alpha=-lr)

with torch.cuda.graph(g):
    update(static_param, static_grad, 0.1)
''',
        '''
import torch

class Block(torch.nn.Module):
    def __init__(self, use_bias):
        super().__init__()
        self.use_bias = use_bias

    def forward(self, x, cache=None):
        if x.shape[0] > 4 and x.dim() == 3:
            x = x.flatten(0, 1)
        if x.dtype == torch.half or isinstance(cache, dict):
            x = x.float()
        if self.use_bias and cache is not None:
            x = x + 1
        return x

block = Block(True)
with torch.cuda.graph(g):
    out = block(static_x)
''',
    )

    def check(self, node, ctx):
        if isinstance(node, cst.BooleanOperation):
            # Only `x and y` used as a value: inside a condition the whole test is judged once.
            parts = [node.left]
        else:
            parts = [p for c in conditions(node) for p in operands(c, ctx)]
        for part in parts:
            if ctx.is_device_tensor(part):
                yield part
                return


class HostStateCondition(Rule):
    code = "CG202"
    name = "branch-on-changing-host-state"
    category = "control-flow"
    severity = "warning"
    summary = "Branches or loops on host state that the code changes between replays (counters, mode flags, `self.training`, loop counts set by a method)."
    message = "{state}, but this {construct} runs only at capture: every replay repeats the path taken then"
    fix_hint = "Make the choice on the device (`torch.where` on a device flag updated with `fill_()`), or capture one graph per mode."
    why = """Python control flow runs once, at capture. A branch on a step counter or a flag
    that changes later is frozen: replays keep executing the kernels of the path that
    was taken at capture, silently, whatever the counter or flag says now."""
    nodes = (cst.If, cst.While, cst.IfExp, cst.For, cst.CompIf)
    invalid = (
        '''
import torch

class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.use_cache = True

    def forward(self, x):
        if self.use_cache:  # expect: CG202
            x = x * 0.5
        return x

model = Model()
with torch.cuda.graph(g):
    out = model(static_x)
for step in range(10):
    model.use_cache = step < 5
    g.replay()
''',
    )
    valid = (
        '''
import torch

class Model(torch.nn.Module):
    def __init__(self, halve):
        super().__init__()
        self.halve = halve

    def forward(self, x):
        if self.halve:
            x = x * 0.5
        return x

model = Model(True)
with torch.cuda.graph(g):
    out = model(static_x)
''',
    )

    def check(self, node, ctx):
        if isinstance(node, cst.For):
            # `for _ in range(self.num_steps)`: the trip count is fixed at capture like a branch.
            bound = node.iter
            if not (isinstance(bound, cst.Call) and ctx.call_name(bound) == "range"):
                return
            parts, construct = [a.value for a in bound.args], "loop"
        else:  # `[n for n, cfg in self.adapter_cfg.items() if cfg["enabled"]]` filters once, at capture
            parts, construct = operands(node.test), "filter" if isinstance(node, cst.CompIf) else "branch"
        for part in parts:
            for expr in _state_reads(part):
                state = ctx.changing_state(expr)
                if state:
                    yield Hit(node.test if construct != "loop" else bound, {"state": state, "construct": construct})
                    return


def _state_reads(expr: cst.BaseExpression):
    """Attributes and names read by a condition (not inside calls: those are values)."""
    return reads(expr, lambda node: isinstance(node, (cst.Comparison, cst.BinaryOperation, cst.UnaryOperation)))
