"""Which torch calls and operators are graph hazards, and under which rule code.

Two levels: `classify_call` sees the Python API (`t.item()`, `torch.nonzero(x)`, with
their arguments) through a TorchFunctionMode; `classify_op` sees ATen operators through a
TorchDispatchMode, which also catches hazards hidden inside library functions.
`gpu` says whether tensors have their real devices; in CPU trace mode every tensor is
on the CPU, so device-dependent checks fall back to what the call spells out.
"""
from __future__ import annotations

import dis
from functools import lru_cache
from types import CodeType, FrameType
from typing import Any, Optional

import torch

Hit = Optional[tuple[str, str]]

_SCALAR_READS = {"item", "__float__", "__int__", "__index__", "__complex__"}
_HOST_COPIES = {"tolist", "numpy", "cpu"}
_NONZERO = {"nonzero", "argwhere", "masked_select"}
_UNIQUE = {"unique", "unique_consecutive", "_unique", "_unique2"}
_FORMAT = {"__repr__", "__str__", "__format__"}
_RESIZE = {"resize_", "resize_as_", "set_"}
_RANDOM_FACTORIES = {"rand", "randn", "randint", "randperm", "normal"}
_INPLACE_RANDOM = {"uniform_", "normal_", "bernoulli_", "random_", "exponential_", "geometric_", "cauchy_", "log_normal_"}
_FROM_DATA = {"tensor", "as_tensor", "asarray"}


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


def classify_call(name: str, args: tuple, kwargs: dict, *, gpu: bool, frame: Optional[FrameType]) -> Hit:
    """A Python-level torch call inside a captured region; None when harmless."""
    self = args[0] if args else None
    if kwargs.get("generator") is not None:
        return "CG304", f"`{name}(generator=...)` draws from a non-default generator"
    if kwargs.get("pin_memory") is True or name == "pin_memory":
        return "CG109", f"`{name}` pins host memory"
    if name == "__bool__":
        if frame is not None and branches_here(frame):
            return "CG201", "Python branch on a tensor value (`Tensor.__bool__`)"
        return "CG101", "`bool(tensor)` reads a tensor value on the host"
    if name in _SCALAR_READS:
        shown = "`.item()`" if name == "item" else f"`{name.strip('_')}(tensor)`"
        return "CG101", f"{shown} reads a tensor value on the host"
    if name in _HOST_COPIES and _is_tensor(self):
        if gpu and self.device.type == "cpu":
            return None
        return "CG102", f"`.{name}()` copies a tensor to the host"
    if name == "to" and _is_tensor(self):
        target = _to_target(args, kwargs)
        explicit_cpu = any(a == "cpu" for a in args[1:]) or kwargs.get("device") == "cpu"
        if target == "cpu" and (self.device.type != "cpu" or (not gpu and explicit_cpu)):
            return "CG102", "`.to('cpu')` copies a tensor to the host"
        if gpu and target == "cuda" and self.device.type == "cpu":
            return "CG402", "`.to('cuda')` copies a host tensor to the device"
        return None
    if name == "cuda" and _is_tensor(self) and self.device.type == "cpu":
        return "CG402", "`.cuda()` copies a host tensor to the device"
    if name in _NONZERO or (name == "where" and len(args) == 1 and not kwargs):
        return "CG105", f"`{name}` has a data-dependent output size (the host waits for it)"
    if name in _UNIQUE:
        return "CG107", f"`{name}` has a data-dependent output size (the host waits for it)"
    if name == "repeat_interleave" and kwargs.get("output_size") is None:
        repeats = kwargs.get("repeats", args[1] if len(args) > 1 else self)
        if _is_tensor(repeats) and repeats.numel() > 1:
            return "CG108", "`repeat_interleave` without output_size reads the total on the host"
        return None
    if name in ("__getitem__", "__setitem__") and len(args) > 1 and _bool_index(args[1]):
        return "CG106", "boolean-mask indexing has a data-dependent size (the host waits for it)"
    if name in _FORMAT:
        return "CG103", "formatting a tensor reads its values on the host"
    if name in _RESIZE:
        return "CG403", f"`.{name}()` can reallocate a tensor the graph uses"
    if name in _FROM_DATA and args and not _is_tensor(args[0]) and "device" in kwargs:
        target = _device_type(kwargs["device"])
        if (gpu and target == "cuda") or (not gpu and kwargs["device"] != "cpu"):
            return "CG402", f"`torch.{name}(host data, device=...)` copies host data to the device"
        return None
    if name in _RANDOM_FACTORIES and not gpu and "device" not in kwargs:
        return "CG303", f"`torch.{name}` without device= draws from the CPU generator"
    if name in _INPLACE_RANDOM and gpu and _is_tensor(self) and self.device.type == "cpu":
        return "CG303", f"`.{name}()` on a host tensor draws from the CPU generator"
    return None


def random_result_on_host(name: str, result: Any) -> Hit:
    """GPU mode: a random factory whose result landed on the CPU."""
    if name in _RANDOM_FACTORIES and _is_tensor(result) and result.device.type == "cpu":
        return "CG303", f"`torch.{name}` drew from the CPU generator"
    return None


_OP_CODES = {
    "_local_scalar_dense": ("CG101", "a library call read a tensor value on the host"),
    "is_nonzero": ("CG101", "a library call read a tensor value on the host"),
    "nonzero": ("CG105", "an operator with a data-dependent output size ran"),
    "argwhere": ("CG105", "an operator with a data-dependent output size ran"),
    "masked_select": ("CG105", "an operator with a data-dependent output size ran"),
    "_unique": ("CG107", "unique ran (data-dependent output size)"),
    "_unique2": ("CG107", "unique ran (data-dependent output size)"),
    "unique_dim": ("CG107", "unique ran (data-dependent output size)"),
    "unique_consecutive": ("CG107", "unique ran (data-dependent output size)"),
    "_pin_memory": ("CG109", "host memory was pinned"),
}


def op_name(func: Any) -> str:
    """'nonzero' for aten.nonzero.default."""
    return func._schema.name.split("::")[-1] if hasattr(func, "_schema") else str(func)


def classify_op(func: Any, args: tuple, kwargs: dict, *, gpu: bool) -> Hit:
    name = op_name(func)
    found = _OP_CODES.get(name)
    if found:
        return found[0], f"{found[1]} (aten.{name})"
    if name == "repeat_interleave" and kwargs.get("output_size") is None and args and _is_tensor(args[0]):
        if len(args) == 1 or _is_tensor(args[1]):
            return "CG108", "repeat_interleave without output_size ran (aten.repeat_interleave)"
    if name in ("index", "index_put", "index_put_", "_index_put_impl_") and len(args) > 1:
        if _bool_index(args[1]):
            return "CG106", f"boolean-mask indexing ran (aten.{name})"
    if gpu and name in ("_to_copy", "copy_") and len(args) >= 1:
        src = args[1] if name == "copy_" and len(args) > 1 else args[0]
        dst_type = args[0].device.type if name == "copy_" else _device_type(kwargs.get("device")) or src.device.type
        if _is_tensor(src) and src.device.type == "cuda" and dst_type == "cpu":
            return "CG102", f"a device-to-host copy ran (aten.{name})"
        if _is_tensor(src) and src.device.type == "cpu" and dst_type == "cuda" and src.dim() > 0:
            return "CG402", f"a host-to-device copy ran (aten.{name})"
    return None


def is_random_op(func: Any) -> bool:
    return torch.Tag.nondeterministic_seeded in getattr(func, "tags", ())


# Library functions whose host reads have a rule of their own: (file name, function) -> hit.
_LIBRARY_CODES = {
    ("clip_grad.py", "clip_grad_norm_"): ("CG111", "`clip_grad_norm_(error_if_nonfinite=True)` reads the norm on the host"),
    ("clip_grad.py", "_clip_grads_with_norm_"): ("CG111", "`clip_grad_norm_` read the norm on the host"),
    ("grad_scaler.py", "step"): ("CG110", "`GradScaler.step` reads the found-inf flags on the host"),
    ("grad_scaler.py", "_maybe_opt_step"): ("CG110", "`GradScaler.step` reads the found-inf flags on the host"),
    ("grad_scaler.py", "update"): ("CG110", "`GradScaler.update` reads the found-inf flags on the host"),
}
_SYNC_CODES = {"CG101", "CG102", "CG105", "CG190", "CG201"}


def library_hit(hit: Hit, frame: Optional[FrameType], user: Optional[FrameType]) -> Hit:
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
