"""frozen-scalar: Python numbers baked into captured kernels while the code changes them.

A Python number passed to a tensor op becomes a constant kernel argument of the
graph. Changing the Python variable afterwards (a temperature, a step counter, a
loop variable of the replay loop, a learning rate) changes nothing the graph
sees: every replay keeps the capture-time value.
"""
from __future__ import annotations

from typing import Optional

import libcst as cst

from cglint import vocabulary
from cglint.engine.syntax import code_of, string_value
from cglint.engine.state import Change, reword
from cglint.rule import REPLAY, Hit, Rule
from cglint.rules.dynamic_shape import changing_number, size_arguments

def _captured_work(call: cst.Call, ctx) -> bool:
    """A call that launches or records device work: a torch op, a tensor method, project code."""
    name = ctx.call_name(call)
    if name is not None:
        if name.startswith("torch."):
            # Tensor ops only: torch.cuda.*, torch.distributed.* and other host-state calls
            # (`set_sync_debug_mode(mode)`) take Python values that are not kernel arguments.
            return ctx.value(call).is_tensor
        return bool(ctx.value(call.func).targets)  # a project function or class
    method = ctx.method(call)
    if method is not None:
        receiver = ctx.value(method[0])
        # A receiver of unknown type counts when the method names a tensor op (`s.mul_(decay)`).
        return receiver.is_tensor or bool(receiver.targets) or ctx.value(call).is_tensor
    return bool(ctx.value(call.func).targets)


def _stored_callable(node: cst.CSTNode, ctx) -> Optional[cst.BaseExpression]:
    """`self._scale_loss` in `self._scale_loss(loss)`: project code held in state (a partial
    with its bound arguments, a function, a module object). Capture records the kernels of
    the one it held then; rebinding it later changes nothing the graph replays."""
    if not isinstance(node, cst.Call) or not isinstance(node.func, (cst.Attribute, cst.Name)):
        return None
    if isinstance(node.func, cst.Name) and ctx.is_local(node.func.value):
        return None
    held = ctx.value(node.func)
    return node.func if held.targets and not held.is_class else None


def _operands(node: cst.CSTNode, ctx) -> list[cst.BaseExpression]:
    """Host expressions that become constants of captured work at `node`."""
    if isinstance(node, cst.BinaryOperation):
        left, right = ctx.is_tensor(node.left), ctx.is_tensor(node.right)
        if left != right:
            return [node.right if left else node.left]
        if not left and not right and not ctx.function.is_property:
            # `config.GUIDANCE * (cond - uncond)` with parameters of unknown kind: in captured
            # code the operand that is not a known host value is almost always a tensor (not
            # in a @property, which computes a host value: `0.5 * self.base_lr * (1 + cos(x))`).
            left_host, right_host = ctx.value(node.left).is_host, ctx.value(node.right).is_host
            if left_host != right_host:
                return [node.left if left_host else node.right]
        return []
    if isinstance(node, cst.AugAssign):  # `logp[..., blank] -= self.penalty`: an in-place kernel
        return [node.value] if ctx.is_tensor(node.target) and not ctx.is_tensor(node.value) else []
    if isinstance(node, cst.Subscript):  # x[self.pos]: an index chosen on the host
        if ctx.is_tensor(node.value):
            return [e.slice.value for e in node.slice if isinstance(e.slice, cst.Index)]
        return []
    if isinstance(node, cst.Call) and ctx.call_name(node) not in vocabulary.names("frozen_scalar.host_calls") and _captured_work(node, ctx):
        sizes = {id(s) for s in size_arguments(node, ctx)}  # sizes are CG702's
        return [a.value for a in node.args if id(a.value) not in sizes and not ctx.is_tensor(a.value)]
    return []


class FrozenHostValue(Rule):
    code = "CG601"
    name = "frozen-host-value"
    category = "frozen-scalar"
    severity = "warning"
    summary = "Passes a Python value to captured tensor work while the code changes it between replays (an attribute updated elsewhere, a variable reassigned in the replay loop)."
    message = "`{read}` is baked into the graph with its capture-time value, but it {state}; replays ignore the new value"
    fix_hint = "Keep the value in a device tensor (`temp = torch.tensor(t, device=...)`) used by the captured code, and update it in place with `temp.fill_(new)` or `copy_()` before replay()."
    why = """Captured kernels take Python numbers as constant arguments. Reassigning the Python
    variable or attribute later changes nothing the graph reads, so every replay keeps
    using the value from capture time: a temperature that never changes, a step count
    stuck at its first value, a schedule that has no effect. No error is raised."""
    fix_safety = "Not safe to automate: the device tensor must be created before capture and refreshed in place."
    nodes = (cst.BinaryOperation, cst.Call, cst.Subscript, cst.AugAssign)
    invalid = (
        '''
import torch

class Sampler:
    def __init__(self, temperature: float):
        self.temperature = temperature

    def set_temperature(self, temperature: float):
        self.temperature = temperature

    def __call__(self, logits: torch.Tensor):
        return torch.softmax(logits / self.temperature, dim=-1)  # expect: CG601

sampler = Sampler(0.8)
with torch.cuda.graph(g):
    static_probs = sampler(static_logits)
for temperature in (0.7, 1.0):
    sampler.set_temperature(temperature)
    g.replay()
''',
        '''
import torch

static_x = torch.ones(8, device="cuda")
scale = 1.0
with torch.cuda.graph(g):
    static_y = static_x * scale  # expect: CG601

for step in range(100):
    scale = 0.99 ** step
    g.replay()
''',
        '''
import torch

class Guided(torch.nn.Module):
    def __init__(self, steps: int):
        super().__init__()
        self.steps = steps
        self.step_index = 0

    @property
    def guidance(self):
        return 7.5 - 6.0 * self.step_index / self.steps

    def forward(self, cond, uncond):
        return uncond + self.guidance * (cond - uncond)  # expect: CG601

model = Guided(50)
with torch.cuda.graph(g):
    static_eps = model(static_cond, static_uncond)
for i in range(50):
    model.step_index = i
    g.replay()
''',
    )
    valid = (
        '''
import torch

class Sampler:
    def __init__(self, temperature):
        self.temperature = torch.full((), temperature, device="cuda")

    def set_temperature(self, temperature):
        self.temperature.fill_(temperature)

    def __call__(self, logits: torch.Tensor):
        return torch.softmax(logits / self.temperature, dim=-1)

sampler = Sampler(0.8)
with torch.cuda.graph(g):
    static_probs = sampler(static_logits)
''',
        '''
import torch

class Norm(torch.nn.Module):
    def __init__(self, eps: float = 1e-6):
        super().__init__()
        self.eps = eps

    def forward(self, x: torch.Tensor):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)

norm = Norm()
with torch.cuda.graph(g):
    static_y = norm(static_x)
for step in range(10):
    g.replay()
''',
        '''
import torch

HPARAMS = {"clip": 0.2, "ent_coef": 0.01}

def policy_loss(ratio, adv):
    clip = HPARAMS["clip"]
    return -torch.min(ratio * adv, ratio.clamp(1 - clip, 1 + clip) * adv).mean()

with torch.cuda.graph(g):
    static_loss = policy_loss(static_ratio, static_adv)
for update in range(100):
    HPARAMS["ent_coef"] = 0.01 * (1 - update / 100)  # another entry: the captured clip stays right
    g.replay()
''',
    )

    def check(self, node, ctx):
        seen: set[str] = set()
        for operand in _operands(node, ctx):
            if isinstance(operand, cst.Call) and next(iter(ctx.host_reads(operand)), None) is None:
                state = ctx.returned_state(operand)  # `loss / get_num_microbatches()`
                if state:
                    yield Hit(operand, {"read": code_of(operand), "state": reword(state, state.split(f"`{code_of(operand)}` ", 1)[-1])})
            for read in ctx.host_reads(operand):
                if code_of(read) in seen:
                    continue  # `arange(pos, pos + 1)`: one finding for `pos`
                state = changing_number(read, ctx, operand=isinstance(node, (cst.BinaryOperation, cst.AugAssign)))
                if state:
                    seen.add(code_of(read))
                    yield Hit(read, {"read": code_of(read), "state": state})
        callee = _stored_callable(node, ctx)
        if callee is not None:
            state = ctx.changing_state(callee, any_write=True)
            if isinstance(state, Change) and state.repeats:
                yield Hit(callee, {"read": code_of(callee), "state": reword(state, state.split(f"`{code_of(callee)}` ", 1)[-1])})


def _lr_is_tensor(optimizer, ctx) -> bool:
    found = ctx.origin_argument(optimizer, 1, "lr")
    return found is not None and found[1].is_tensor


class LrChangedForCapturedStep(Rule):
    code = "CG602"
    name = "lr-change-ignored-by-captured-step"
    category = "frozen-scalar"
    severity = "warning"
    summary = "Steps an LR scheduler or writes `param_group[\"lr\"]` between replays of a graph that captured `optimizer.step()` with a Python-float learning rate."
    message = "`{expr}` changes the learning rate between replays, but the captured optimizer step baked the float lr in at capture; replays keep training with the old rate"
    fix_hint = "Build the optimizer with a tensor lr (`lr=torch.tensor(1e-3, device=\"cuda\")`, `capturable=True`), so schedulers update it in place; or keep optimizer.step() out of the graph."
    why = """With a float learning rate, the captured optimizer kernels take the lr as a
    constant. A scheduler (or code writing `param_group["lr"]`) updates the Python
    float between replays, which the graph never reads again: the schedule silently
    has no effect. A tensor lr is read from device memory on every replay, and the
    schedulers update it in place."""
    scope = REPLAY
    nodes = (cst.Call, cst.Assign, cst.AugAssign)
    invalid = (
        '''
import torch

opt = torch.optim.AdamW(model.parameters(), lr=1e-3, capturable=True)
sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=1000)
g = torch.cuda.CUDAGraph()
with torch.cuda.graph(g):
    loss = model(static_x).sum()
    loss.backward()
    opt.step()

for _ in range(1000):
    g.replay()
    sched.step()  # expect: CG602
''',
    )
    valid = (
        '''
import torch

opt = torch.optim.AdamW(model.parameters(), lr=torch.tensor(1e-3, device="cuda"), capturable=True)
sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=1000)
g = torch.cuda.CUDAGraph()
with torch.cuda.graph(g):
    loss = model(static_x).sum()
    loss.backward()
    opt.step()

for _ in range(1000):
    g.replay()
    sched.step()
''',
        '''
import torch

opt = torch.optim.SGD(model.parameters(), lr=0.1)
sched = torch.optim.lr_scheduler.StepLR(opt, step_size=100)
g = torch.cuda.CUDAGraph()
with torch.cuda.graph(g):
    loss = model(static_x).sum()
    loss.backward()

for _ in range(1000):
    g.replay()
    opt.step()
    sched.step()
''',
    )

    def check(self, node, ctx):
        capture = ctx.capture_calling("optimizer.step", "grad_scaler.step")
        if capture is None:
            return
        if isinstance(node, cst.Call):
            method = ctx.method(node)
            if method is None or method[1] != "step":
                return
            scheduler = ctx.value(method[0])
            optimizer = ctx.origin_argument(scheduler, 0, "optimizer") if scheduler.tag == "lr_scheduler" else None
            if optimizer is None or optimizer[1].tag != "optimizer" or _lr_is_tensor(optimizer[1], ctx):
                return
        else:
            targets = [t.target for t in node.targets] if isinstance(node, cst.Assign) else [node.target]
            if not any(_lr_key(t) for t in targets):
                return
        if ctx.replay_follows():
            yield Hit(node, capture=capture)


def _lr_key(target: cst.BaseExpression) -> bool:
    """`group["lr"] = ...`, `opt.param_groups[0]["lr"] = ...`."""
    if not isinstance(target, cst.Subscript) or len(target.slice) != 1:
        return False
    index = target.slice[0].slice
    return isinstance(index, cst.Index) and string_value(index.value) == "lr"
