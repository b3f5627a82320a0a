"""Which torch calls and operators are graph hazards, and under which rule code.

Two levels: `classify_call` sees the Python API (`t.item()`, `torch.nonzero(x)`, with
their arguments) through a TorchFunctionMode or a capture's call wrappers (callpatches);
`classify_op` sees ATen operators through a TorchDispatchMode, which also catches hazards
hidden inside library functions.
`gpu` says whether tensors have their real devices; in CPU trace mode every tensor is
on the CPU, so device-dependent checks fall back to what the call spells out.
"""
from __future__ import annotations

import dis
from functools import lru_cache
from types import CodeType, FrameType
from typing import Any, Collection, Optional

import torch

from cglint import vocabulary
from cglint.verify.findings import rule_codes as rc

Hit = Optional[tuple[str, str]]

# The vocabulary's entries this module matches, and the names a TorchFunctionMode sees for them.
_SCALAR_READS = vocabulary.entry("sync.scalar_reads")
_HOST_COPIES = vocabulary.entry("sync.host_copies")
_FORMATTING = vocabulary.entry("sync.formatting")
_SIZED = vocabulary.entry("sync.data_dependent_size")
_MASK_INDEXING = vocabulary.entry("sync.mask_indexing")
_UNIQUE = vocabulary.entry("sync.unique")
_REPEAT = vocabulary.entry("sync.repeat_interleave")
_PIN = vocabulary.entry("sync.pin_memory")
_GENERATOR = vocabulary.entry("cpu_rng.custom_generator")
_HOST_DRAWS = vocabulary.entry("cpu_rng.host_draws")
_INPLACE_DRAWS = vocabulary.entry("cpu_rng.inplace_draws")
_COPIES = vocabulary.entry("realloc.device_copies")
_RESIZE = vocabulary.entry("realloc.resize")
_FROM_HOST = vocabulary.entry("realloc.from_host_data")
_SINGLE_ARGUMENT = vocabulary.short(_SIZED.runtime("single_argument"))  # torch.where(condition)
RANDOM_FACTORIES = _HOST_DRAWS.calls


def _is_tensor(x: Any) -> bool:
    return isinstance(x, torch.Tensor)


def _device_type(value: Any) -> Optional[str]:
    if isinstance(value, torch.device):
        return value.type
    if isinstance(value, str):
        return torch.device(value).type
    if isinstance(value, int) and not isinstance(value, bool):
        return "cuda"
    if _is_tensor(value):
        return value.device.type
    return None


def _bool_index(index: Any) -> bool:
    items = index if isinstance(index, (tuple, list)) else (index,)
    return any(_is_tensor(i) and i.dtype in (torch.bool, torch.uint8) for i in items)


def _to_target(args: tuple, kwargs: dict) -> Optional[str]:
    if "device" in kwargs:
        return _device_type(kwargs["device"])
    for arg in args[1:]:
        if isinstance(arg, (str, torch.device)) or _is_tensor(arg):
            return _device_type(arg)
    return None


@lru_cache(maxsize=4096)
def _instructions(code: CodeType) -> dict[int, tuple[str, str]]:
    """offset -> (opname, opname of the next instruction)."""
    ins = list(dis.get_instructions(code))
    return {a.offset: (a.opname, b.opname) for a, b in zip(ins, ins[1:] + ins[-1:])}


def branches_here(frame: FrameType) -> bool:
    """Whether `frame` is converting a value to bool for a jump (`if t:`, `while t > 0:`)."""
    opname, following = _instructions(frame.f_code).get(frame.f_lasti, ("", ""))
    if opname == "TO_BOOL":  # 3.13+: the jump follows
        opname = following
    return "JUMP" in opname and "IF" in opname


def classify_call(name: str, args: tuple, kwargs: dict, *, gpu: bool, frame: Optional[FrameType],
                  owned_generators: Collection[Any] = ()) -> Hit:
    """A Python-level torch call inside a captured region; None when harmless.

    owned_generators: those registered with the capturing graph (register_generator_state),
    which advance on every replay like the default generator."""
    self: Any = args[0] if args else None
    generator = kwargs.get("generator")
    if generator is not None and not any(generator is owned for owned in owned_generators):
        return rc.CUSTOM_GENERATOR, f"`{name}(generator=...)` draws from a non-default generator"
    if kwargs.get("pin_memory") is True or name in _PIN.calls:
        return rc.PIN_MEMORY, f"`{name}` pins host memory"
    if name == "__bool__":
        if frame is not None and branches_here(frame):
            return rc.TENSOR_DEPENDENT_BRANCH, "Python branch on a tensor value (`Tensor.__bool__`)"
        return rc.TENSOR_TO_SCALAR, "`bool(tensor)` reads a tensor value on the host"
    if name in _SCALAR_READS.calls:
        shown = f"`.{name}()`" if name in _SCALAR_READS.runtime("methods") else f"`{name.strip('_')}(tensor)`"
        return _SCALAR_READS.code, f"{shown} reads a tensor value on the host"
    if name in _HOST_COPIES.calls and _is_tensor(self):
        if gpu and self.device.type == "cpu":
            return None
        return _HOST_COPIES.code, f"`.{name}()` copies a tensor to the host"
    if name == "to" and _is_tensor(self):
        target = _to_target(args, kwargs)
        explicit_cpu = any(a == "cpu" for a in args[1:]) or kwargs.get("device") == "cpu"
        if target == "cpu" and (self.device.type != "cpu" or (not gpu and explicit_cpu)):
            return rc.DEVICE_TO_HOST_COPY, "`.to('cpu')` copies a tensor to the host"
        if gpu and target == "cuda" and self.device.type == "cpu":
            return rc.HOST_TO_DEVICE_IN_CAPTURE, "`.to('cuda')` copies a host tensor to the device"
        return None
    if name == "copy_" and gpu and len(args) > 1 and _is_tensor(self) and _is_tensor(args[1]):
        src = args[1]  # `static_x.copy_(host_batch, non_blocking=True)`: no sync, so no capture error to show it
        if self.device.type == "cuda" and src.device.type == "cpu" and src.dim() > 0:
            return rc.HOST_TO_DEVICE_IN_CAPTURE, "`.copy_()` copies a host tensor to the device"
        if self.device.type == "cpu" and src.device.type == "cuda":
            return rc.DEVICE_TO_HOST_COPY, "`.copy_()` copies a device tensor to the host"
        return None
    if name == "cuda" and _is_tensor(self) and self.device.type == "cpu":
        return rc.HOST_TO_DEVICE_IN_CAPTURE, "`.cuda()` copies a host tensor to the device"
    if name in _SIZED.calls or (name in _SINGLE_ARGUMENT and len(args) == 1 and not kwargs):
        return _SIZED.code, f"`{name}` has a data-dependent output size (the host waits for it)"
    if name in _UNIQUE.calls:
        return _UNIQUE.code, f"`{name}` has a data-dependent output size (the host waits for it)"
    if name in _REPEAT.calls and kwargs.get("output_size") is None:
        repeats = kwargs.get("repeats", args[1] if len(args) > 1 else self)
        if _is_tensor(repeats) and repeats.numel() > 1:
            return rc.REPEAT_INTERLEAVE_WITHOUT_OUTPUT_SIZE, "`repeat_interleave` without output_size reads the total on the host"
        return None
    if name in _MASK_INDEXING.calls and len(args) > 1 and _bool_index(args[1]):
        return _MASK_INDEXING.code, "boolean-mask indexing has a data-dependent size (the host waits for it)"
    if name in _FORMATTING.calls:
        return _FORMATTING.code, "formatting a tensor reads its values on the host"
    if name in _RESIZE.calls:
        return _RESIZE.code, f"`.{name}()` can reallocate a tensor the graph uses"
    if name in _FROM_HOST.calls and args and not _is_tensor(args[0]) and "device" in kwargs:
        target = _device_type(kwargs["device"])
        if (gpu and target == "cuda") or (not gpu and kwargs["device"] != "cpu"):
            return _FROM_HOST.code, f"`torch.{name}(host data, device=...)` copies host data to the device"
        return None
    if name in RANDOM_FACTORIES and not gpu and "device" not in kwargs and default_device_type() == "cpu":
        return _HOST_DRAWS.code, f"`torch.{name}` without device= draws from the CPU generator"
    if name in _INPLACE_DRAWS.calls and gpu and _is_tensor(self) and self.device.type == "cpu":
        return _INPLACE_DRAWS.code, f"`.{name}()` on a host tensor draws from the CPU generator"
    return None


# Every name classify_call can report (given no generator= or pin_memory= argument): the
# torch-function hook passes any other call straight through, which is most of them.
CALL_NAMES = _SINGLE_ARGUMENT.union(*(entry.calls for entry in (
    _SCALAR_READS, _HOST_COPIES, _FORMATTING, _SIZED, _MASK_INDEXING, _UNIQUE, _REPEAT, _PIN, _HOST_DRAWS,
    _INPLACE_DRAWS, _COPIES, _RESIZE, _FROM_HOST)))
CALL_KWARGS = _GENERATOR.runtime("keywords") | _PIN.runtime("keywords")


def default_device_type() -> str:
    """The device a factory call without device= allocates on: `with torch.device("cuda"):` and
    torch.set_default_device("cuda") make it CUDA (on the CPU trace, where every tensor is on the
    CPU, only these say where the script meant its random tensors to be drawn)."""
    from torch.overrides import _get_current_function_mode_stack
    from torch.utils._device import DeviceContext

    context = next((m for m in reversed(_get_current_function_mode_stack()) if isinstance(m, DeviceContext)), None)
    if context is None:
        context = getattr(getattr(torch, "_GLOBAL_DEVICE_CONTEXT", None), "device_context", None)
    if context is None:
        return "cpu"
    return "cuda" if getattr(context, EMULATED_CUDA, False) else torch.device(context.device).type


# Set on a DeviceContext whose device the script named "cuda" and the CPU emulation made the CPU.
EMULATED_CUDA = "_cglint_emulated_cuda"


def random_result_on_host(name: str, result: Any) -> Hit:
    """GPU mode: a random factory whose result landed on the CPU."""
    if name in RANDOM_FACTORIES and _is_tensor(result) and result.device.type == "cpu":
        return _HOST_DRAWS.code, f"`torch.{name}` drew from the CPU generator"
    return None


# Operators that are hazards whatever their arguments.
_OP_CODES = {name: entry for entry in (_SCALAR_READS, _SIZED, _UNIQUE, _PIN) for name in entry.runtime("ops")}


def op_name(func: Any) -> str:
    """'nonzero' for aten.nonzero.default."""
    return func._schema.name.split("::")[-1] if hasattr(func, "_schema") else str(func)


# Every operator name classify_op can report.
_REPEAT_OPS, _COPY_OPS, _MASK_OPS = (entry.runtime("ops") for entry in (_REPEAT, _COPIES, _MASK_INDEXING))
OP_NAMES = frozenset(_OP_CODES).union(_REPEAT_OPS, _COPY_OPS, _MASK_OPS)


def classify_op(func: Any, args: tuple, kwargs: dict, *, gpu: bool) -> Hit:
    name = op_name(func)
    found = _OP_CODES.get(name)
    if found:
        return found.code, f"{found.what} (aten.{name})"
    if name in _REPEAT_OPS and kwargs.get("output_size") is None and args and _is_tensor(args[0]):
        if len(args) == 1 or _is_tensor(args[1]):
            return rc.REPEAT_INTERLEAVE_WITHOUT_OUTPUT_SIZE, "repeat_interleave without output_size ran (aten.repeat_interleave)"
    if name in _MASK_OPS and len(args) > 1:
        if _bool_index(args[1]):
            return _MASK_INDEXING.code, f"{_MASK_INDEXING.what} (aten.{name})"
    if gpu and name in _COPY_OPS and len(args) >= 1:
        src = args[1] if name == "copy_" and len(args) > 1 else args[0]
        dst_type = args[0].device.type if name == "copy_" else _device_type(kwargs.get("device")) or src.device.type
        if _is_tensor(src) and src.device.type == "cuda" and dst_type == "cpu":
            return rc.DEVICE_TO_HOST_COPY, f"a device-to-host copy ran (aten.{name})"
        if _is_tensor(src) and src.device.type == "cpu" and dst_type == "cuda" and src.dim() > 0:
            return rc.HOST_TO_DEVICE_IN_CAPTURE, f"a host-to-device copy ran (aten.{name})"
    return None


# Library functions whose host reads have a rule of their own: (file name, function) -> hit.
_LIBRARY_CODES = {
    (entry.file, function): (entry.code, entry.what)
    for entry in (vocabulary.entry("sync.clip_grad_norm"), vocabulary.entry("sync.grad_scaler"))
    for function in entry.runtime("library_functions")
}
# Codes of host reads that a library function with its own rule explains better.
_SYNC_CODES = {rc.TENSOR_TO_SCALAR, rc.DEVICE_TO_HOST_COPY, rc.DATA_DEPENDENT_OUTPUT_SIZE, rc.RUNTIME_SYNC,
               rc.TENSOR_DEPENDENT_BRANCH}


def library_hit(hit: tuple[str, str], frame: Optional[FrameType], user: Optional[FrameType]) -> tuple[str, str]:
    """A sync inside a library function with its own rule (GradScaler, clip_grad_norm_) gets that rule."""
    if hit is None or hit[0] not in _SYNC_CODES:
        return hit
    while frame is not None and frame is not user:
        code = frame.f_code
        found = _LIBRARY_CODES.get((code.co_filename.rsplit("/", 1)[-1], code.co_name))
        if found:
            return found
        frame = frame.f_back
    return hit
