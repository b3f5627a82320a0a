"""host-effect: host work inside a captured region that replays never repeat.

A replay launches the recorded kernels and nothing else. The Python code of the
region ran once, at capture: its prints, log lines, file writes, timers, counters
and appends happened then and are silently missing on every replay.

Prints of tensors are CG103 (they also fail capture) and are left to it.
"""
from __future__ import annotations

import libcst as cst

from cglint import vocabulary
from cglint.engine.syntax import code_of
from cglint.engine.values import Kind
from cglint.rule import Hit, Rule

_ONCE = "runs once, at capture; replays never run it again"


def _is_print(call: cst.Call, ctx) -> bool:
    return ctx.call_name(call) in vocabulary.names("host_effect.print")


class PrintInCapture(Rule):
    code = "CG501"
    name = "print-in-capture"
    category = "host-effect"
    aggregate = True
    severity = "info"
    summary = "Prints from captured code: `print(...)`, `sys.stdout.write(...)`."
    message = "`{expr}` " + _ONCE + ", so the output appears once instead of on every step"
    fix_hint = "Print outside the graph: after replay() (reading the static outputs), or during warmup."
    why = """Printing is host work. During capture it runs once; a replay only launches the
    recorded kernels, so the line never appears again. Code that prints progress or
    values from inside a captured step silently stops reporting.
    Severity info: only output is lost; no value the program computes changes, so it
    ranks below hazards that fail capture or change results."""
    fix_safety = "Safe: moving a print changes no value computed on the GPU."
    nodes = (cst.Call,)
    invalid = (
        '''
import torch

def forward(model, x):
    out = model(x)
    print("forward", tuple(out.shape))  # expect: CG501
    return out

with torch.cuda.graph(g):
    static_out = forward(model, static_x)
''',
    )
    valid = (
        '''
import torch

def forward(model, x):
    return model(x)

with torch.cuda.graph(g):
    static_out = forward(model, static_x)
g.replay()
print("forward", tuple(static_out.shape))
''',
    )

    def check(self, node, ctx):
        if not _is_print(node, ctx):
            return
        if any(ctx.is_tensor(arg.value) for arg in node.args if arg.keyword is None):
            return  # print(tensor): CG103 reports it (the formatting fails capture first)
        yield node


class LoggingInCapture(Rule):
    code = "CG502"
    name = "logging-in-capture"
    category = "host-effect"
    aggregate = True
    severity = "info"
    summary = "Logs from captured code: `logging`, a logger's `info()`/`debug()`/..., `wandb.log`."
    message = "`{expr}` " + _ONCE + ", so this log record is written once instead of on every step"
    fix_hint = "Log outside the graph: after replay() from the static outputs, or during warmup."
    why = """Log calls are host work. Inside a captured region they run once, at capture,
    and replays skip them: metrics stop being recorded and warnings stop being issued,
    with no error. `warnings.warn` and `logger.warning_once` are not reported: they
    report once by design, so nothing is lost.
    Severity info: only output is lost; no value the program computes changes, so it
    ranks below hazards that fail capture or change results."""
    fix_safety = "Safe: moving a log call changes no value computed on the GPU."
    nodes = (cst.Call,)
    invalid = (
        '''
import logging
import torch

log = logging.getLogger(__name__)

def train_step(model, x, y):
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    log.info("step done")  # expect: CG502
    return loss

with torch.cuda.graph(g):
    static_loss = train_step(model, static_x, static_y)
''',
    )
    valid = (
        '''
import logging
import torch

log = logging.getLogger(__name__)

def train_step(model, x, y):
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    return loss

with torch.cuda.graph(g):
    static_loss = train_step(model, static_x, static_y)
for step in range(10):
    g.replay()
    log.info("step %d loss %.4f", step, static_loss.item())
''',
    )

    def check(self, node, ctx):
        if ctx.call_name(node) in vocabulary.names("host_effect.logging"):
            yield node
            return
        method = ctx.method(node)
        if method is None or method[1] not in vocabulary.names("host_effect.logger_methods"):
            return
        receiver = method[0]
        leaf = receiver.attr.value if isinstance(receiver, cst.Attribute) else receiver.value if isinstance(receiver, cst.Name) else ""
        # A logger by its constructor, or by the names loggers get (`logger`, `self.log`);
        # `math.log`-like names are calls of a function, never a receiver of `.info()`.
        if ctx.value(receiver).tag == "logger" or leaf in vocabulary.names("host_effect.logger_names"):
            yield node


class FileIOInCapture(Rule):
    code = "CG503"
    name = "file-io-in-capture"
    category = "host-effect"
    aggregate = True
    severity = "warning"
    summary = "Reads or writes files from captured code: `open`, `torch.save`/`torch.load`, `json.dump`, `np.save`, TensorBoard writers."
    message = "`{expr}` " + _ONCE + ": the file is read or written at capture and never again"
    fix_hint = "Do file I/O outside the graph: load before capture into static tensors, save after replay()."
    why = """File access is host work and is not recorded into the graph. A log file written
    inside the captured step gets one line, at capture; data loaded there is loaded once
    and reused by every replay. Saving device tensors (`torch.save(out, path)`) also
    copies them to the host, which fails capture outright (see CG102)."""
    nodes = (cst.Call,)
    invalid = (
        '''
import torch

def step(model, x, log_path):
    out = model(x)
    with open(log_path, "a") as log:  # expect: CG503
        log.write("step\\n")
    return out

with torch.cuda.graph(g):
    static_out = step(model, static_x, "steps.log")
''',
    )
    valid = (
        '''
import torch

def step(model, x):
    return model(x)

with torch.cuda.graph(g):
    static_out = step(model, static_x)
with open("steps.log", "a") as log:
    for _ in range(10):
        g.replay()
        log.write("step\\n")
torch.save(static_out, "out.pt")
''',
    )

    def check(self, node, ctx):
        if ctx.call_name(node) in vocabulary.names("host_effect.file_io"):
            yield node
            return
        method = ctx.method(node)
        if method is not None and method[1] in vocabulary.names("host_effect.summary_writer_methods"):
            if ctx.value(method[0]).tag == "summary_writer":
                yield node


def _outlives_call(target: cst.BaseExpression, ctx) -> bool:
    """`self.x` or a module global: state that outlives the call (a local list does not, nor
    the state a constructor gives the object it builds: built in captured code, the object is
    the capture's own, as transient as a local); an entry of such state too
    (`self._history[name]`, a list a metrics store keeps per name)."""
    if isinstance(target, cst.Subscript):
        return _outlives_call(target.value, ctx)
    if isinstance(target, cst.Attribute):
        base = target.value
        function = ctx.function
        return (isinstance(base, cst.Name) and bool(function.params) and function.is_method
                and base.value == function.params[0].name.value and function.name != "__init__")
    if isinstance(target, cst.Name):
        return not ctx.is_local(target.value) or ctx.declared_global(target.value)
    return False


class HostContainerMutation(Rule):
    code = "CG504"
    name = "host-container-mutation-in-capture"
    category = "host-effect"
    aggregate = True
    severity = "warning"
    summary = "Appends to or pops from a list on `self` or a module global from code reached by a capture."
    message = "`{expr}` " + _ONCE + ": `{container}` changes once, at capture, and never on replay"
    fix_hint = "Write into a preallocated device tensor (`buf[i].copy_(x)`), or collect results after replay()."
    why = """A list that outlives the call is host state. Captured code appends to it (or
    pops from it) once, at capture; replays do not run Python, so the history or queue it
    holds stops changing while the GPU work goes on. Keyed stores and idempotent changes
    (`cache[key] = value`, `dict.update`, `set.add`) are not reported: done once at capture
    they leave the container as every later call would, which is how engines fill caches
    and workspaces. Code written directly in the capture block (registering static outputs)
    is not reported: it runs once on purpose. A list used as a stack (pushed and popped in
    one call) is not reported either."""
    nodes = (cst.Call,)
    invalid = (
        '''
import torch

class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(8, 8)
        self.history = []

    def forward(self, x):
        y = self.proj(x)
        self.history.append(y.detach())  # expect: CG504
        return y

model = Model()
with torch.cuda.graph(g):
    static_y = model(static_x)
''',
    )
    valid = (
        '''
import torch

class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(8, 8)

    def forward(self, x):
        parts = []
        for _ in range(2):
            parts.append(self.proj(x))
        return torch.stack(parts)

model = Model()
outputs = {}
with torch.cuda.graph(g):
    outputs["y"] = model(static_x)
history = []
for _ in range(3):
    g.replay()
    history.append(outputs["y"].clone())
''',
        '''
import torch

_ranges = []

def range_push(msg):
    _ranges.append(msg)  # a stack: popped below within the same call
    torch.cuda.nvtx.range_push(msg)

def range_pop():
    _ranges.pop()
    torch.cuda.nvtx.range_pop()

def step(model, x):
    range_push("forward")
    y = model(x)
    range_pop()
    return y

with torch.cuda.graph(g):
    static_y = step(model, static_x)
''',
        '''
import torch

class Linear(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(8, 8))
        self._workspaces = {}

    def forward(self, x):
        ws = self._workspaces.get(x.dtype)
        if ws is None:
            ws = self.weight.to(x.dtype)
        self._workspaces[x.dtype] = ws  # keyed store: the same entry on every call
        return x @ ws

layer = Linear()
with torch.cuda.graph(g):
    static_y = layer(static_x)
''',
    )

    def check(self, node, ctx):
        if ctx.in_capture_block:
            return  # the capture block itself registers static outputs on purpose
        method = ctx.method(node)
        if method is None or method[1] not in vocabulary.names("host_effect.container_writes"):
            return
        container = method[0]
        if _outlives_call(container, ctx) and ctx.value(container).kind == Kind.HOST and not _lazy(node, ctx):
            if not _stack(container, ctx) and not _emptied_before(container, ctx):
                yield Hit(node, {"container": code_of(container)})


def _emptied_before(container, ctx) -> bool:
    """`self.quantizers[key] = []` earlier in the same call, then filled: each call rebuilds
    the list from nothing, so running once at capture leaves what every call leaves."""
    name = code_of(container, limit=200)
    for statement in ctx.before():
        for small in statement.body if isinstance(statement, cst.SimpleStatementLine) else ():
            if (isinstance(small, cst.Assign) and isinstance(small.value, (cst.List, cst.ListComp))
                    and any(code_of(t.target, limit=200) == name for t in small.targets)):
                return True
    return False


def _stack(container, ctx) -> bool:
    """A container its module also pops (`_nvtx_range_messages.append(msg)` in `range_push`,
    `.pop()` in `range_pop`, as Transformer Engine does): a stack pushed and popped within
    one call ends where it started, at capture and without it."""
    name = code_of(container, limit=200)
    return ctx.module_mentions(f"{name}.pop(", f"{name}.append(")


def _lazy(node, ctx) -> bool:
    """Memoisation (`if key not in self.cache: self.cache[key] = ...`): filled on the first,
    eager call during warmup; at capture the entry exists and the code does not run."""
    for outer in ctx.enclosing(node):
        if isinstance(outer, cst.If):
            text = code_of(outer.test, limit=200)
            if " not in " in text or " is None" in text or "hasattr(" in text:
                return True
    return False


class HostCounter(Rule):
    code = "CG505"
    name = "host-counter-in-capture"
    category = "host-effect"
    aggregate = True
    severity = "warning"
    summary = "Updates a Python counter on `self` or a global from code reached by a capture (`self.step += 1`), or steps an iterator held there (`next(self.schedule)`)."
    message = "`{expr}` " + _ONCE + ": `{counter}` stops counting while replays go on"
    fix_hint = "Count outside the graph (increment after each replay()), or keep the counter in a device tensor updated in place (`steps.add_(1)`)."
    why = """A Python counter is host state. Incremented inside captured code, it advances
    once, at capture, and then stands still: step counts, schedules and `every N steps`
    logic read a stale number while the GPU keeps running. A counter held in a device
    tensor and updated in place (`self.steps += 1` on a tensor) is captured and is fine."""
    nodes = (cst.AugAssign, cst.Assign, cst.Call)
    invalid = (
        '''
import torch

class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(8, 8)
        self.num_calls = 0

    def forward(self, x):
        self.num_calls += 1  # expect: CG505
        return self.proj(x)

model = Model()
with torch.cuda.graph(g):
    static_y = model(static_x)
''',
        '''
import torch

def guidance_schedule(start, end, steps):
    for i in range(steps):
        yield start + (end - start) * i / (steps - 1)

class Denoiser(torch.nn.Module):
    def __init__(self, unet, steps):
        super().__init__()
        self.unet = unet
        self._guidance = guidance_schedule(7.0, 1.5, steps)

    def forward(self, x, t, cond, uncond):
        scale = next(self._guidance)  # expect: CG505
        eps_c, eps_u = self.unet(x, t, cond), self.unet(x, t, uncond)
        return eps_u + scale * (eps_c - eps_u)

denoiser = Denoiser(unet, 30)
with torch.cuda.graph(g):
    static_eps = denoiser(static_x, static_t, static_cond, static_uncond)
''',
    )
    valid = (
        '''
import torch

class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(8, 8)
        self.steps = torch.zeros((), dtype=torch.long, device="cuda")

    def forward(self, x):
        self.steps += 1
        return self.proj(x)

model = Model()
num_calls = 0
with torch.cuda.graph(g):
    static_y = model(static_x)
for _ in range(3):
    g.replay()
    num_calls += 1
''',
    )

    def check(self, node, ctx):
        if ctx.in_capture_block:
            return
        if isinstance(node, cst.Call):
            # `next(self._guidance)`: an iterator kept in state steps once, at capture; a fresh
            # one (`next(iter(model.parameters()))`, a local) keeps nothing between calls.
            args = [a.value for a in node.args if a.keyword is None and not a.star]
            if ctx.call_name(node) in vocabulary.names("host_effect.iterator_steps", "builtins") and args \
                    and isinstance(args[0], (cst.Attribute, cst.Name)) and _outlives_call(args[0], ctx):
                yield Hit(node, {"counter": code_of(args[0])})
            return
        if isinstance(node, cst.AugAssign):
            target = node.target
        else:
            target = node.targets[0].target if len(node.targets) == 1 else None
            # `self.n = self.n + 1`: a counter written out in full.
            if target is None or not isinstance(node.value, cst.BinaryOperation) or code_of(node.value.left) != code_of(target):
                return
        if not isinstance(target, (cst.Attribute, cst.Name)) or not _outlives_call(target, ctx):
            return
        if isinstance(target, cst.Name) and not ctx.declared_global(target.value):
            return
        value = ctx.value(target)
        if value.kind == Kind.HOST:  # a device tensor counter updated in place is captured
            yield Hit(node, {"counter": code_of(target)})


class TimerInCapture(Rule):
    code = "CG506"
    name = "timer-in-capture"
    category = "host-effect"
    aggregate = True
    severity = "warning"
    summary = "Reads a host clock or sleeps in captured code: `time.time()`, `perf_counter()`, `time.sleep()`."
    message = "`{expr}` " + _ONCE + ": the time is read at capture and replays reuse nothing of it"
    fix_hint = "Time replays from outside the graph (around replay(), with torch.cuda.Event timing)."
    why = """Host clocks run on the CPU. Inside a captured region they are read once, while
    the graph is being recorded (when nothing runs on the GPU yet); a timing or a
    rate computed from them measures capture, and any time value baked into a kernel
    argument stays the capture-time value."""
    nodes = (cst.Call,)
    invalid = (
        '''
import time
import torch

def step(model, x):
    start = time.perf_counter()  # expect: CG506
    out = model(x)
    return out

with torch.cuda.graph(g):
    static_out = step(model, static_x)
''',
    )
    valid = (
        '''
import time
import torch

def step(model, x):
    return model(x)

with torch.cuda.graph(g):
    static_out = step(model, static_x)
start = time.perf_counter()
g.replay()
torch.cuda.synchronize()
elapsed = time.perf_counter() - start
''',
    )

    def check(self, node, ctx):
        if ctx.call_name(node) in vocabulary.names("host_effect.timers"):
            yield node


class ProgressBarInCapture(Rule):
    code = "CG507"
    name = "progress-bar-in-capture"
    category = "host-effect"
    aggregate = True
    severity = "info"
    summary = "Creates or updates a progress bar (`tqdm`) in captured code."
    message = "`{expr}` " + _ONCE + ": the progress bar moves at capture and then freezes"
    fix_hint = "Drive the progress bar from the replay loop, outside the graph."
    why = """A progress bar is host output. Updated from captured code it advances once, at
    capture; replays do not run Python, so it never moves again.
    Severity info: only output is lost; no value the program computes changes, so it
    ranks below hazards that fail capture or change results."""
    fix_safety = "Safe: progress output changes no value computed on the GPU."
    nodes = (cst.Call,)
    invalid = (
        '''
import torch
from tqdm import tqdm

def run_layers(layers, x):
    for layer in tqdm(layers):  # expect: CG507
        x = layer(x)
    return x

with torch.cuda.graph(g):
    static_out = run_layers(layers, static_x)
''',
    )
    valid = (
        '''
import torch
from tqdm import tqdm

def run_layers(layers, x):
    for layer in layers:
        x = layer(x)
    return x

with torch.cuda.graph(g):
    static_out = run_layers(layers, static_x)
for _ in tqdm(range(100)):
    g.replay()
''',
    )

    def check(self, node, ctx):
        if ctx.value(node).tag == "progress_bar" and ctx.call_name(node) in vocabulary.object_tags():
            yield node
            return
        method = ctx.method(node)
        if method is not None and method[1] in vocabulary.names("host_effect.progress_bar_methods"):
            if ctx.value(method[0]).tag == "progress_bar":
                yield node
