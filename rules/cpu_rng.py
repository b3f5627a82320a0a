"""cpu-rng: host random numbers and RNG state handling inside a captured region.

Only the device generator's Philox offset advances on replay. Anything drawn on the
host is drawn once, at capture, and baked into the graph; generator state calls
are refused while capturing.
"""
from __future__ import annotations

import libcst as cst

from cglint import vocabulary
from cglint.engine.syntax import dotted_name, keyword
from cglint.engine.values import Kind
from cglint.rule import Rule

_FROZEN = "is drawn once, at capture; every replay reuses the same value"


def _draws(key: str, name: str) -> bool:
    """A call of a function of the entry's `modules` (`random.random`) that is not one of its `constructors`."""
    modules = tuple(f"{module}." for module in vocabulary.names(key, "modules"))
    return name.startswith(modules) and name not in vocabulary.names(key, "constructors")


class PythonRandom(Rule):
    code = "CG301"
    name = "python-random"
    category = "cpu-rng"
    severity = "warning"
    summary = "Draws from Python's `random` module inside a captured region."
    message = "`{expr}` " + _FROZEN
    fix_hint = "Draw on the device: `torch.rand((), device=x.device)`, or pass a device tensor filled before each replay."
    why = """`random.random()` runs on the host while the graph is recorded; its result
    becomes a constant kernel argument. Replays reuse that one number: dropout masks,
    sampling thresholds or augmentations stop being random, silently."""
    nodes = (cst.Call,)
    invalid = (
        '''
import random
import torch

def maybe_drop(x, p):
    if random.random() < p:  # expect: CG301
        return torch.zeros_like(x)
    return x

with torch.cuda.graph(g):
    out = maybe_drop(static_x, 0.1)
''',
    )
    valid = (
        '''
import torch

def maybe_drop(x, p):
    keep = torch.rand((), device=x.device) >= p
    return x * keep

with torch.cuda.graph(g):
    out = maybe_drop(static_x, 0.1)
''',
    )

    def check(self, node, ctx):
        name = ctx.call_name(node) or ""
        if _draws("cpu_rng.python_random", name):
            yield node
            return
        method = ctx.method(node)
        if method is not None and ctx.value(method[0]).tag == "python_rng":
            yield node


class NumpyRandom(Rule):
    code = "CG302"
    name = "numpy-random"
    category = "cpu-rng"
    severity = "warning"
    summary = "Draws from `numpy.random` (legacy functions or a `default_rng()` generator) inside a captured region."
    message = "`{expr}` " + _FROZEN
    fix_hint = "Draw with torch on the device (`torch.rand(..., device=...)`)."
    why = """NumPy draws on the host during capture; the result is copied into the graph
    as a constant (or its copy fails capture). Replays never draw again."""
    nodes = (cst.Call,)
    invalid = (
        '''
import numpy as np
import torch

def jitter(x):
    noise = np.random.normal(0.0, 0.01)  # expect: CG302
    return x + noise

with torch.cuda.graph(g):
    out = jitter(static_x)
''',
    )
    valid = (
        '''
import torch

def jitter(x):
    return x + 0.01 * torch.randn_like(x)

with torch.cuda.graph(g):
    out = jitter(static_x)
''',
    )

    def check(self, node, ctx):
        name = ctx.call_name(node) or ""
        if _draws("cpu_rng.numpy_random", name):
            yield node
            return
        method = ctx.method(node)
        if method is not None and ctx.value(method[0]).tag == "numpy_rng":
            yield node


class HostRngToDevice(Rule):
    code = "CG303"
    name = "cpu-rng-to-device"
    category = "cpu-rng"
    severity = "error"
    summary = "Moves a tensor drawn by the CPU torch RNG to the device: `torch.rand(n).cuda()`."
    message = "`{expr}` copies host random numbers to the device during capture; PyTorch refuses CPU-to-CUDA copies of unpinned memory while capturing, and the numbers would be frozen anyway"
    fix_hint = "Draw on the device directly: `torch.rand(n, device=\"cuda\")`."
    why = """The CPU generator runs once, at capture, and the copy to the device is a
    host-to-device transfer from pageable memory, which PyTorch rejects during capture
    ("Cannot copy between CPU and CUDA tensors during CUDA graph capture"). With pinned
    memory it would capture, but replay the same numbers forever."""
    fix_safety = (
        "Safe: `--fix` draws on the device (`device=`) instead of moving host numbers there: the same "
        "distribution, drawn afresh on every replay. Not offered when a generator, pinned memory or "
        "`requires_grad` ties the draw to the host."
    )
    nodes = (cst.Call,)
    invalid = (
        '''
import torch

def add_noise(x):
    noise = torch.randn(x.shape).cuda()  # expect: CG303
    return x + noise

with torch.cuda.graph(g):
    out = add_noise(static_x)
''',
        '''
import torch

def add_noise(x):
    b = torch.rand(4, 4, dtype=torch.half).to("cuda", non_blocking=True)  # expect: CG303
    c = torch.randint(0, 10, (8,)).to(x.device)  # token ids  # expect: CG303
    return x + b + c

with torch.cuda.graph(g):
    out = add_noise(static_x)
''',
        '''
import torch

def add_noise(x, gen):
    return x + torch.randn(4, generator=gen).cuda()  # expect: CG303

with torch.cuda.graph(g):
    y = add_noise(static_x, gen)
''',
    )
    valid = (
        '''
import torch

def add_noise(x):
    noise = torch.randn(x.shape, device=x.device)
    return x + noise

with torch.cuda.graph(g):
    out = add_noise(static_x)
''',
    )
    fixed = (
        '''
import torch

def add_noise(x):
    noise = torch.randn(x.shape, device="cuda")
    return x + noise

with torch.cuda.graph(g):
    out = add_noise(static_x)
''',
        '''
import torch

def add_noise(x):
    b = torch.rand(4, 4, dtype=torch.half, device="cuda")
    c = torch.randint(0, 10, (8,), device=x.device)  # token ids
    return x + b + c

with torch.cuda.graph(g):
    out = add_noise(static_x)
''',
        None,
    )

    def check(self, node, ctx):
        method = ctx.method(node)
        if method is None:
            return
        receiver, name = method
        value = ctx.value(receiver)
        if not (value.random and value.kind == Kind.CPU_TENSOR):
            return
        if name == "cuda" or (name == "to" and ctx.to_device(node) == "device"):
            yield node

    def fix(self, node, ctx):
        # `torch.randn(shape).cuda()` -> `torch.randn(shape, device="cuda")`: only a factory call
        # moved as it is, with nothing (generator, pinning, autograd) that ties it to the host.
        receiver = node.func.value if isinstance(node.func, cst.Attribute) else None
        draws = vocabulary.short(vocabulary.names("cpu_rng.device_draws", "functions"))
        if not isinstance(receiver, cst.Call) or (dotted_name(receiver.func) or "").rsplit(".", 1)[-1] not in draws:
            return None
        if any(keyword(receiver, k) is not None for k in vocabulary.names("cpu_rng.device_draws", "tied_keywords")):
            return None
        device = _target_device(node, node.func.attr.value)
        return None if device is None else ctx.with_keyword(receiver, "device", device)


def _target_device(call: cst.Call, method: str):
    """The device a `.cuda(...)` / `.to(...)` call names, if that is all it does."""
    args = [a for a in call.args if not (a.keyword is not None and a.keyword.value in vocabulary.names("cpu_rng.device_draws", "move_keywords"))]
    if method == "cuda" and not args:
        return cst.SimpleString('"cuda"')
    if len(args) != 1 or (args[0].keyword is not None and args[0].keyword.value != "device"):
        return None
    value = args[0].value
    if method == "cuda" or isinstance(value, cst.SimpleString) or (dotted_name(value) or "").rsplit(".", 1)[-1] in ("device", "dev"):
        return value
    if isinstance(value, cst.Call) and (dotted_name(value.func) or "").endswith("device"):
        return value  # torch.device("cuda", 1)
    return None


class CustomGenerator(Rule):
    code = "CG304"
    name = "custom-generator"
    category = "cpu-rng"
    severity = "error"
    summary = "Passes a non-default `torch.Generator` as `generator=` inside a captured region."
    message = "`{expr}` uses a generator the graph does not own; capture fails unless it is registered with `graph.register_generator_state()`"
    fix_hint = "Use the default CUDA generator, or call `g.register_generator_state(gen)` before capture."
    why = """Only generators registered with the graph get their offsets advanced on replay.
    An unregistered CUDA generator raises "Attempt to increase offset for a CUDA
    generator not in capture mode"; a CPU generator draws once on the host."""
    nodes = (cst.Call,)
    invalid = (
        '''
import torch

gen = torch.Generator(device="cuda")
gen.manual_seed(0)

with torch.cuda.graph(g):
    noise = torch.randn(16, device="cuda", generator=gen)  # expect: CG304
''',
    )
    valid = (
        '''
import torch

torch.manual_seed(0)
with torch.cuda.graph(g):
    noise = torch.randn(16, device="cuda")
''',
    )

    def check(self, node, ctx):
        generator = keyword(node, "generator")
        if generator is None or (isinstance(generator, cst.Name) and generator.value == "None"):
            return
        # Only a known generator: `generator=generator` forwarding an optional argument
        # that is None at every call site must not be flagged.
        if ctx.value(generator).tag == "generator":
            yield node


class GeneratorInRegion(Rule):
    code = "CG305"
    name = "generator-created-in-capture"
    category = "cpu-rng"
    severity = "error"
    summary = "Creates a `torch.Generator` inside a captured region."
    message = "`{expr}` creates a generator during capture; PyTorch refuses to construct a CUDA generator while capturing"
    fix_hint = "Create generators before capture and register them with the graph."
    why = """Constructing a CUDA generator during capture raises "Cannot construct a new
    CUDAGeneratorImpl during CUDA graph capture"; a CPU one would draw on the host once."""
    nodes = (cst.Call,)
    invalid = (
        '''
import torch

def sample(probs):
    gen = torch.Generator(device=probs.device)  # expect: CG305
    return torch.multinomial(probs, 1, generator=gen)  # expect: CG304

with torch.cuda.graph(g):
    token = sample(static_probs)
''',
    )
    valid = (
        '''
import torch

def sample(probs):
    return torch.multinomial(probs, 1)

with torch.cuda.graph(g):
    token = sample(static_probs)
''',
    )

    def check(self, node, ctx):
        if ctx.call_name(node) in vocabulary.names("cpu_rng.generator_constructors", "functions"):
            yield node


class RngStateInRegion(Rule):
    code = "CG306"
    name = "rng-state-in-capture"
    category = "cpu-rng"
    severity = "info"
    summary = "Seeds or reads/sets CUDA RNG state inside a captured region: `manual_seed`, `seed`, `torch.cuda.get_rng_state`, `torch.cuda.set_rng_state`."
    message = "`{expr}` touches the generator state during capture; it runs once, at capture, and older PyTorch versions refuse it (`Cannot call CUDAGeneratorImpl::... during CUDA graph capture`)"
    fix_hint = "Seed before capture; inside the graph the default generator's offset advances on each replay by itself."
    why = """The CUDA generator's seed and offset are owned by the graph during capture;
    PyTorch versions before graph-safe generator state raise when they are read or set,
    which is also how activation checkpointing with `preserve_rng_state=True` and some
    dropout kernels failed under capture. On torch 2.11 (H100) `torch.manual_seed` inside
    a capture succeeded, so this is info: the seeding itself is host work done once."""
    nodes = (cst.Call,)
    invalid = (
        '''
import torch

def forward(model, x):
    torch.manual_seed(1234)  # expect: CG306
    return model(x)

with torch.cuda.graph(g):
    out = forward(model, static_x)
''',
    )
    valid = (
        '''
import torch

def forward(model, x):
    return model(x)

torch.manual_seed(1234)
with torch.cuda.graph(g):
    out = forward(model, static_x)
''',
        '''
import torch

def checkpointed(block, x):
    cpu_state = torch.get_rng_state()  # the CPU generator: not owned by the graph
    out = block(x)
    torch.set_rng_state(cpu_state)
    return out

with torch.cuda.graph(g):
    out = checkpointed(block, static_x)
''',
    )
    # `torch.get_rng_state()` / `set_rng_state()` (also under `torch.random`) are the CPU
    # generator's state: saving it around a captured block (activation checkpointing,
    # Megatron's RNG tracker) touches nothing the graph owns, so the vocabulary's
    # `cpu_rng.seeding` leaves them to the verifier.

    def check(self, node, ctx):
        if ctx.call_name(node) in vocabulary.names("cpu_rng.seeding", "functions"):
            yield node
            return
        method = ctx.method(node)
        if method is not None and method[1] in vocabulary.names("cpu_rng.seeding", "methods"):
            if ctx.value(method[0]).tag == "generator":
                yield node


class HostRngNumber(Rule):
    code = "CG307"
    name = "cpu-rng-number"
    category = "cpu-rng"
    severity = "warning"
    summary = "Reads numbers drawn by the CPU torch RNG into Python inside a captured region: `torch.rand(()).item()`, `float(torch.rand(1))`, `.tolist()`."
    message = "`{expr}` " + _FROZEN
    fix_hint = "Draw on the device (`torch.rand((), device=x.device)`) and keep the number a tensor."
    why = """A tensor drawn without `device=` lives in host memory, so reading it back is no
    sync and the capture succeeds; but the CPU generator runs once, at capture, and
    the number becomes a constant kernel argument. Replays reuse it: dropout rates,
    noise scales or sampling thresholds drawn this way stop being random, silently."""
    nodes = (cst.Call,)
    invalid = (
        '''
import torch

def jitter(x):
    scale = torch.rand(()).item()  # expect: CG307
    return x * (1.0 + 0.1 * scale)

with torch.cuda.graph(g):
    out = jitter(static_x)
''',
    )
    valid = (
        '''
import torch

def jitter(x):
    scale = torch.rand((), device=x.device)
    return x * (1.0 + 0.1 * scale)

with torch.cuda.graph(g):
    out = jitter(static_x)
''',
        '''
import torch

def jitter(x, scale):
    return x * (1.0 + 0.1 * scale)

scale = torch.rand(()).item()
with torch.cuda.graph(g):
    out = jitter(static_x, scale)
''',
    )

    def check(self, node, ctx):
        method = ctx.method(node)
        if method is not None and method[1] in vocabulary.names("values.number_reads") and not node.args:
            drawn = method[0]
        elif ctx.call_name(node) in vocabulary.names("sync.scalar_reads", "builtins") and len(node.args) == 1:
            drawn = node.args[0].value
        else:
            return
        value = ctx.value(drawn)
        if value.random and value.kind == Kind.CPU_TENSOR:
            yield node
