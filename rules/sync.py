"""sync: host-device synchronization inside a captured region.

A sync makes the host wait for the GPU. During capture nothing has run yet, so
CUDA refuses: cudaErrorStreamCaptureUnsupported (900), and every later op in the
capture fails with cudaErrorStreamCaptureInvalidated (901).
"""
from __future__ import annotations

import libcst as cst

from cglint import vocabulary
from cglint.engine.syntax import identifiers, is_true, keyword, positional
from cglint.rule import Rule

_CAPTURE_FAILS = "capture fails with cudaErrorStreamCaptureUnsupported"


class TensorToScalar(Rule):
    code = "CG101"
    name = "tensor-to-scalar"
    category = "sync"
    severity = "error"
    summary = "Reads a tensor element into a Python number: `.item()`, `float(t)`, `int(t)`, `bool(t)`."
    message = "`{expr}` copies a tensor value to the host and waits for the GPU; " + _CAPTURE_FAILS
    fix_hint = "Keep the value on the device (use it as a tensor), or read it after replay()."
    why = """Turning a tensor element into a Python number calls `_local_scalar_dense`, a
    device-to-host copy followed by a stream synchronize. A capturing stream cannot be
    synchronized, so capture fails with error 900 and the rest of the capture with 901.
    Even where it could be captured, the number would be read once and frozen."""
    nodes = (cst.Call,)
    invalid = (
        '''
import torch

def train_step(model, x, y):
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    return loss.item()  # expect: CG101

g = torch.cuda.CUDAGraph()
with torch.cuda.graph(g):
    value = train_step(model, static_x, static_y)
''',
    )
    valid = (
        '''
import torch

def train_step(model, x, y):
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    return loss

g = torch.cuda.CUDAGraph()
with torch.cuda.graph(g):
    static_loss = train_step(model, static_x, static_y)
g.replay()
print(static_loss.item())
''',
        '''
import torch

with torch.cuda.graph(g):
    n = int(x.shape[0])
    scale = float(x.size(-1)) ** -0.5
    y = x * scale
''',
    )

    def check(self, node, ctx):
        method = ctx.method(node)
        if method is not None:
            receiver, name = method
            # A tensor in host memory is read without waiting for the GPU (CG307 covers host draws).
            if name in vocabulary.names("sync.scalar_reads", "methods") and not node.args and ctx.maybe_tensor(receiver) and not ctx.is_host_tensor(receiver):
                yield node
            return
        if ctx.call_name(node) in vocabulary.names("sync.scalar_reads", "builtins") and len(node.args) == 1:
            if ctx.is_device_tensor(node.args[0].value):
                yield node


class DeviceToHost(Rule):
    code = "CG102"
    name = "device-to-host-copy"
    category = "sync"
    severity = "error"
    summary = "Copies a tensor to host memory: `.cpu()`, `.tolist()`, `.numpy()`, `.to(\"cpu\")`."
    message = "`{expr}` copies a tensor to host memory and waits for it; " + _CAPTURE_FAILS
    fix_hint = "Keep the work on the device; copy results to the host after replay()."
    why = """A copy into pageable host memory is synchronous: the host waits for the copy,
    which a capturing stream forbids (error 900). PyTorch also rejects any copy between
    CPU and CUDA tensors during capture unless the host side is pinned."""
    nodes = (cst.Call,)
    invalid = (
        '''
import torch

class Decoder(torch.nn.Module):
    def forward(self, logits):
        return logits.argmax(-1).cpu()  # expect: CG102

decoder = Decoder()
with torch.cuda.graph(g):
    tokens = decoder(static_logits)
''',
    )
    valid = (
        '''
import torch

class Decoder(torch.nn.Module):
    def forward(self, logits):
        return logits.argmax(-1)

decoder = Decoder()
with torch.cuda.graph(g):
    tokens = decoder(static_logits)
g.replay()
host_tokens = tokens.cpu()
''',
        '''
import torch

with torch.cuda.graph(g):
    y = x.to(torch.float16)
    z = y.to(x.device)
''',
    )

    def check(self, node, ctx):
        method = ctx.method(node)
        if method is None:
            return
        receiver, name = method
        if not ctx.maybe_tensor(receiver) or ctx.is_host_tensor(receiver):
            return  # copying a tensor that is already in host memory waits for nothing
        if name == "tolist" and node.args:
            return  # Tensor.tolist() takes no arguments: `td.tolist(as_linked_list=True)` is another class's
        if name in vocabulary.names("sync.host_copies", "methods") or (name == "to" and ctx.to_device(node) == "cpu"):
            yield node


class TensorFormatted(Rule):
    code = "CG103"
    name = "tensor-formatted"
    category = "sync"
    severity = "error"
    summary = "Prints or formats a tensor: `print(t)`, f-strings, `str(t)`, `repr(t)`."
    message = "`{expr}` formats a tensor's values, which copies them to the host; " + _CAPTURE_FAILS
    fix_hint = "Print after replay(), or print metadata only (shape, dtype)."
    why = """Formatting a tensor reads its values on the host: a device-to-host copy and a
    synchronize, which fails capture (900). Even printing that did succeed would run
    once at capture and never again on replay."""
    nodes = (cst.Call, cst.FormattedString)
    invalid = (
        '''
import torch

def forward(x):
    h = torch.relu(x)
    print("hidden", h)  # expect: CG103
    return h

with torch.cuda.graph(g):
    out = forward(static_x)
''',
    )
    valid = (
        '''
import torch

def forward(x):
    return torch.relu(x)

with torch.cuda.graph(g):
    out = forward(static_x)
g.replay()
print("hidden", out)
''',
    )

    def check(self, node, ctx):
        if isinstance(node, cst.FormattedString):
            for part in node.parts:
                if isinstance(part, cst.FormattedStringExpression) and ctx.is_tensor(part.expression):
                    yield node
                    return
            return
        name = ctx.call_name(node)
        if name in vocabulary.names("sync.formatting", "builtins"):
            if any(value.is_tensor for value in ctx.positional_values(node)):
                yield node


class ExplicitSync(Rule):
    code = "CG104"
    name = "explicit-synchronize"
    category = "sync"
    severity = "error"
    summary = "Synchronizes or polls explicitly: `torch.cuda.synchronize()`, stream or event `.synchronize()` / `.query()`."
    message = "`{expr}` waits for or polls the GPU; " + _CAPTURE_FAILS
    fix_hint = "Remove it from the captured code; synchronize before capture or after replay()."
    why = """cudaDeviceSynchronize, cudaStreamSynchronize, cudaEventSynchronize and the query
    calls are illegal while a stream is capturing (900); the capture is invalidated.
    PyTorch's sync debug mode does not report `torch.cuda.synchronize()`."""
    fix_safety = (
        "Safe: `--fix` deletes a `torch.cuda.synchronize()` (or stream or event `.synchronize()`) statement; "
        "it cannot be captured and changes no result. Not offered in functions that make `non_blocking` "
        "copies, which it may be ordering with the host."
    )
    nodes = (cst.Call,)
    invalid = (
        '''
import torch

def step(x):
    y = x * 2
    torch.cuda.synchronize()  # expect: CG104
    return y

with torch.cuda.graph(g):
    out = step(static_x)
''',
        '''
import torch

done = torch.cuda.Event()
with torch.cuda.graph(g):
    out = static_x * 2
    done.record()
    done.synchronize()  # expect: CG104
''',
        '''
import torch

def step(x):
    y = x * 2
    # make sure the kernels are done
    torch.cuda.synchronize()  # expect: CG104
    z = y + 1; torch.cuda.synchronize()  # expect: CG104
    if z.dim() > 1:
        torch.cuda.synchronize()  # expect: CG104
    return z

with torch.cuda.graph(g):
    out = step(static_x)
''',
        '''
import torch

def fetch(x):
    h = x.to("cpu", non_blocking=True)  # expect: CG102
    torch.cuda.synchronize()  # expect: CG104
    return h

with torch.cuda.graph(g):
    y = fetch(static_x)
''',
        '''
import torch

s = torch.cuda.Stream()
with torch.cuda.graph(g):
    y = static_x * 2
    ready = s.query()  # expect: CG104
''',
    )
    valid = (
        '''
import torch

def step(x):
    return x * 2

torch.cuda.synchronize()
with torch.cuda.graph(g):
    out = step(static_x)
g.replay()
torch.cuda.synchronize()
''',
    )
    fixed = (
        '''
import torch

def step(x):
    y = x * 2
    return y

with torch.cuda.graph(g):
    out = step(static_x)
''',
        '''
import torch

done = torch.cuda.Event()
with torch.cuda.graph(g):
    out = static_x * 2
    done.record()
''',
        '''
import torch

def step(x):
    y = x * 2
    # make sure the kernels are done
    z = y + 1
    if z.dim() > 1:
        pass
    return z

with torch.cuda.graph(g):
    out = step(static_x)
''',
        None,
        None,
    )

    def check(self, node, ctx):
        name = ctx.call_name(node)
        if name in vocabulary.names("sync.explicit", "functions"):
            yield node
            return
        method = ctx.method(node)
        if method is not None and method[1] in vocabulary.names("sync.explicit", "methods"):
            value = ctx.value(method[0])
            if value.tag in vocabulary.names("sync.explicit", "receivers"):
                yield node

    def fix(self, node, ctx):
        statement = ctx.parent(node)
        name = node.func.attr.value if isinstance(node.func, cst.Attribute) else getattr(node.func, "value", "")
        if not isinstance(statement, cst.Expr) or name != "synchronize":
            return None  # `.query()` and synchronize used as a value stay for the user
        if "non_blocking" in identifiers(ctx.function_of(node)):
            return None
        return ctx.remove_statement(statement)


class DataDependentSize(Rule):
    code = "CG105"
    name = "data-dependent-output-size"
    category = "sync"
    severity = "error"
    summary = "Calls an op whose output size depends on data: `nonzero`, `argwhere`, one-argument `torch.where`, `masked_select`."
    message = "`{expr}` must read the number of results back to the host to size its output; " + _CAPTURE_FAILS
    fix_hint = "Use a fixed-size form: `torch.nonzero_static(x, size=...)`, three-argument `torch.where`, or a mask multiply."
    why = """These ops count their results on the GPU and copy the count to the host to
    allocate the output, a synchronizing copy that fails capture (900). The output
    size would also differ between replays, which a graph cannot express."""
    nodes = (cst.Call,)
    invalid = (
        '''
import torch

def active_rows(x):
    idx = torch.nonzero(x.sum(-1) > 0)  # expect: CG105
    return x[idx]

with torch.cuda.graph(g):
    out = active_rows(static_x)
''',
    )
    valid = (
        '''
import torch

def active_rows(x):
    keep = x.sum(-1, keepdim=True) > 0
    return torch.where(keep, x, torch.zeros_like(x))

with torch.cuda.graph(g):
    out = active_rows(static_x)
''',
    )

    def check(self, node, ctx):
        name = ctx.call_name(node)
        if name in vocabulary.names("sync.data_dependent_size", "functions"):
            yield node
            return
        if name in vocabulary.names("sync.data_dependent_size", "single_argument") and len(node.args) == 1:
            yield node
            return
        method = ctx.method(node)
        if method is not None and method[1] in vocabulary.names("sync.data_dependent_size", "methods") and ctx.maybe_tensor(method[0]):
            yield node


class BooleanMaskIndex(Rule):
    code = "CG106"
    name = "boolean-mask-index"
    category = "sync"
    severity = "error"
    summary = "Indexes a tensor with a boolean mask: `x[mask]`, `x[mask] = tensor`, `x[mask] += v`."
    message = "`{expr}` indexes with a boolean mask, which counts the selected elements on the host; " + _CAPTURE_FAILS
    fix_hint = "Use `torch.where(mask, value, x)`, `x.masked_fill(mask, v)` or a multiply by the mask."
    why = """Boolean-mask indexing runs `nonzero` to turn the mask into indices, a
    synchronizing copy of the count (900). Assignment of a tensor through a mask
    (`index_put_` with a bool index) does the same. Assigning a Python number
    (`x[mask] = 0.0`) is not reported: PyTorch turns it into `masked_fill_`, which
    captured fine on torch 2.11 (H100)."""
    nodes = (cst.Subscript,)
    invalid = (
        '''
import torch

def inlier_mean(x, limit):
    return x[x.abs() < limit].mean()  # expect: CG106

with torch.cuda.graph(g):
    out = inlier_mean(static_x, 3.0)
''',
    )
    valid = (
        '''
import torch

def inlier_mean(x, limit):
    keep = (x.abs() < limit).to(x.dtype)
    return (x * keep).sum() / keep.sum().clamp_min(1.0)

with torch.cuda.graph(g):
    out = inlier_mean(static_x, 3.0)
''',
        '''
import torch

def clip_outliers(x, limit):
    x[x.abs() > limit] = 0.0
    return x.masked_fill(x.isnan(), 0.0)

with torch.cuda.graph(g):
    out = clip_outliers(static_x, 3.0)
    first = out[0]
    rows = out[:, : out.shape[1] // 2]
''',
    )

    def check(self, node, ctx):
        if not ctx.maybe_tensor(node.value) or _scalar_assignment(node, ctx):
            return
        for element in node.slice:
            index = element.slice
            if isinstance(index, cst.Index) and _is_mask(index.value, ctx):
                yield node
                return


def _scalar_assignment(node: cst.Subscript, ctx) -> bool:
    """`x[mask] = 0.0`: a Python number assigned through the subscript (PyTorch uses masked_fill_)."""
    stmt = ctx.statement
    if not isinstance(stmt, cst.SimpleStatementLine):
        return False
    for small in stmt.body:
        if isinstance(small, cst.Assign) and any(t.target is node for t in small.targets):
            return ctx.value(small.value).is_host
    return False


def _is_mask(expr: cst.BaseExpression, ctx) -> bool:
    """A boolean tensor: a tensor comparison, isnan, a logical op, or a name bound to one."""
    return ctx.is_tensor(expr) and ctx.value(expr).tag == "mask"


class UniqueOp(Rule):
    code = "CG107"
    name = "unique"
    category = "sync"
    severity = "error"
    summary = "Calls `torch.unique` or `unique_consecutive`."
    message = "`{expr}` sizes its output from the data and reads the count on the host; " + _CAPTURE_FAILS
    fix_hint = "Use a fixed-size alternative (`torch.bincount(x, minlength=n)`, a one-hot sum, or sort with a static size)."
    why = """unique counts distinct values on the GPU and synchronizes to allocate its
    output (900 during capture); its output size also changes with the data."""
    nodes = (cst.Call,)
    invalid = (
        '''
import torch

def route(expert_ids):
    return torch.unique(expert_ids)  # expect: CG107

with torch.cuda.graph(g):
    experts = route(static_ids)
''',
    )
    valid = (
        '''
import torch

def route(expert_ids, num_experts):
    return torch.bincount(expert_ids, minlength=num_experts)

with torch.cuda.graph(g):
    counts = route(static_ids, 8)
''',
    )

    def check(self, node, ctx):
        name = ctx.call_name(node)
        if name in vocabulary.names("sync.unique", "functions"):
            yield node
            return
        method = ctx.method(node)
        if method is not None and method[1] in vocabulary.names("sync.unique", "methods") and ctx.maybe_tensor(method[0]):
            yield node


class RepeatInterleaveNoSize(Rule):
    code = "CG108"
    name = "repeat-interleave-without-output-size"
    category = "sync"
    severity = "error"
    summary = "Calls `repeat_interleave` with tensor repeats and no `output_size=`."
    message = "`{expr}` sums its repeats on the host to size the output; " + _CAPTURE_FAILS
    fix_hint = "Pass `output_size=` (the known total), which skips the host read."
    why = """With a tensor of repeats and no output_size, repeat_interleave reads the total
    (`cumsum[-1].item()`) back to the host: a synchronize that fails capture (900)."""
    nodes = (cst.Call,)
    invalid = (
        '''
import torch

def expand_tokens(x, counts):
    return torch.repeat_interleave(x, counts, dim=0)  # expect: CG108

with torch.cuda.graph(g):
    out = expand_tokens(static_x, static_counts)
''',
    )
    valid = (
        '''
import torch

def expand_tokens(x, counts, total):
    return torch.repeat_interleave(x, counts, dim=0, output_size=total)

class GroupedAttention(torch.nn.Module):
    def forward(self, k):  # each key head serves n_heads // n_kv_heads query heads
        return torch.repeat_interleave(k, dim=2, repeats=self.n_heads // self.n_kv_heads)

with torch.cuda.graph(g):
    out = expand_tokens(static_x, static_counts, 64)
    doubled = static_x.repeat_interleave(2, dim=0)
    keys = GroupedAttention()(static_k)
''',
    )

    def check(self, node, ctx):
        if keyword(node, "output_size") is not None:
            return
        name = ctx.call_name(node)
        method = ctx.method(node)
        if name in vocabulary.names("sync.repeat_interleave", "functions"):
            args = positional(node)
            repeats = keyword(node, "repeats") or (args[1] if len(args) > 1 else args[0] if len(args) == 1 else None)
        elif method is not None and method[1] in vocabulary.names("sync.repeat_interleave", "methods") and ctx.maybe_tensor(method[0]):
            args = positional(node)
            repeats = keyword(node, "repeats") or (args[0] if args else None)
        else:
            return
        if repeats is not None and not ctx.value(repeats).is_host:
            # `self.num_heads // self.num_kv_heads`: arithmetic on no known tensor is a count.
            counted = isinstance(repeats, cst.BinaryOperation) and not ctx.value(repeats).is_tensor
            if ctx.maybe_tensor(repeats) and not counted:
                yield node


class PinMemory(Rule):
    code = "CG109"
    name = "pin-memory"
    category = "sync"
    severity = "info"
    summary = "Pins host memory (`.pin_memory()`) inside a captured region."
    message = "`{expr}` allocates pinned host memory during capture; nothing of it is recorded in the graph, and a first pinned allocation there (cudaHostAlloc, event queries) can invalidate the capture"
    fix_hint = "Pin buffers once before capture and reuse them."
    why = """Pinned allocation goes through the caching host allocator, which queries CUDA
    events and may call cudaHostAlloc; both are illegal during capture (900/901), and
    sync debug mode does not report them. On torch 2.11 (H100) a capture whose warmup had
    already pinned memory succeeded (the cached pinned block was reused), so this is info:
    the copy is host work that replays skip."""
    nodes = (cst.Call,)
    invalid = (
        '''
import torch

with torch.cuda.graph(g):
    staging = host_buffer.pin_memory()  # expect: CG109
    out = static_x * 2
''',
    )
    valid = (
        '''
import torch

staging = host_buffer.pin_memory()
with torch.cuda.graph(g):
    out = static_x * 2
''',
    )

    def check(self, node, ctx):
        method = ctx.method(node)
        if method is not None and method[1] in vocabulary.names("sync.pin_memory", "methods") and not ctx.value(method[0]).is_host:
            yield node


class GradScalerStep(Rule):
    code = "CG110"
    name = "grad-scaler-step"
    category = "sync"
    severity = "error"
    summary = "Calls a GradScaler's `step()` inside a captured region."
    message = "`{expr}` checks for inf/NaN gradients on the host (`.item()`); " + _CAPTURE_FAILS
    fix_hint = "Capture forward and backward only; call scaler.step(opt) and scaler.update() after replay()."
    why = """GradScaler.step reads the found-inf flag with `.item()` to decide whether to
    skip the optimizer step: a host sync that fails capture (900), and a decision that a
    graph could never change on replay. (`update()` stays on the device and is not flagged.)"""
    nodes = (cst.Call,)
    invalid = (
        '''
import torch

scaler = torch.cuda.amp.GradScaler()
with torch.cuda.graph(g):
    loss = model(static_x).sum()
    scaler.scale(loss).backward()
    scaler.step(optimizer)  # expect: CG110
''',
    )
    valid = (
        '''
import torch

scaler = torch.cuda.amp.GradScaler()
with torch.cuda.graph(g):
    loss = model(static_x).sum()
    scaler.scale(loss).backward()
g.replay()
scaler.step(optimizer)
scaler.update()
''',
    )

    def check(self, node, ctx):
        method = ctx.method(node)
        if method is not None and method[1] in vocabulary.names("sync.grad_scaler", "methods"):
            if ctx.value(method[0]).tag == "grad_scaler":
                yield node


class ClipGradNonfinite(Rule):
    code = "CG111"
    name = "clip-grad-error-if-nonfinite"
    category = "sync"
    severity = "error"
    summary = "Calls `clip_grad_norm_(..., error_if_nonfinite=True)` inside a captured region."
    message = "`{expr}` checks the norm on the host to raise on inf/NaN; " + _CAPTURE_FAILS
    fix_hint = "Drop `error_if_nonfinite=True` in captured code; check the returned norm after replay()."
    why = """With error_if_nonfinite=True, clip_grad_norm_ tests the total norm with a Python
    `if` on a tensor: a host sync (900 during capture), and a check that could never
    fire again on replay."""
    fix_safety = "Safe: `--fix` drops `error_if_nonfinite=True`; removing the check changes no value computed on the GPU."
    nodes = (cst.Call,)
    invalid = (
        '''
import torch

with torch.cuda.graph(g):
    loss = model(static_x).sum()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0, error_if_nonfinite=True)  # expect: CG111
''',
        '''
import torch

with torch.cuda.graph(g):
    loss = model(static_x).sum()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(  # expect: CG111
        model.parameters(), max_norm=1.0, error_if_nonfinite=True
    )
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), error_if_nonfinite=True, max_norm=2.0)  # expect: CG111
''',
    )
    valid = (
        '''
import torch

with torch.cuda.graph(g):
    loss = model(static_x).sum()
    loss.backward()
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
''',
    )
    fixed = (
        '''
import torch

with torch.cuda.graph(g):
    loss = model(static_x).sum()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
''',
        '''
import torch

with torch.cuda.graph(g):
    loss = model(static_x).sum()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(
        model.parameters(), max_norm=1.0
    )
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=2.0)
''',
    )

    def check(self, node, ctx):
        name = ctx.call_name(node) or ""
        method = ctx.method(node)
        is_clip = name.endswith("clip_grad_norm_") or (method is not None and method[1] == "clip_grad_norm_")
        if is_clip and is_true(keyword(node, "error_if_nonfinite")):
            yield node

    def fix(self, node, ctx):
        return ctx.without_keyword(node, "error_if_nonfinite")
