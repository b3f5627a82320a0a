"""The two torch hooks of an instrumented run.

ApiMode (a TorchFunctionMode) sees each torch call with its Python arguments and records
API-level hazards. OpMode (a TorchDispatchMode) sees each ATen operator: it records the
operator sequence and shapes (to compare two inputs), the device tensors read but not
made inside the run (to check them before replay), and hazards hidden in library code.
"""
from __future__ import annotations

import sys
import weakref
from dataclasses import dataclass
from types import CodeType
from typing import TYPE_CHECKING, Any, Optional

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

from cglint.verify import classify, frames

if TYPE_CHECKING:
    from cglint.verify.instrument import Instrumentation

_MAX_TRACE = 200_000


@dataclass(frozen=True)
class OpRecord:
    op: str
    shapes: tuple
    code: Optional[CodeType]
    line: int

    def where(self) -> str:
        path = frames.display_path(self.code.co_filename) if self.code else "?"
        return f"{path}:{self.line}"


@dataclass
class ExternalInput:
    """A device tensor the run read that existed before it."""

    ref: "weakref.ref[torch.Tensor]"
    data_ptr: int
    shape: tuple
    op: str
    code: Optional[CodeType]
    line: int


def _flat(values: Any):
    for v in values:
        if isinstance(v, (list, tuple)):
            yield from _flat(v)
        else:
            yield v


def _name(func: Any) -> str:
    return getattr(func, "__name__", "") or str(func)


class ApiMode(TorchFunctionMode):
    def __init__(self, inst: "Instrumentation"):
        super().__init__()
        self.inst = inst

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = _name(func)
        caller = sys._getframe(1)
        user = frames.user_frame(caller)
        hit = classify.classify_call(name, args, kwargs, gpu=self.inst.gpu, frame=user,
                                     owned_generators=self.inst.owned_generators)
        hit = classify.library_hit(hit, caller, user)
        rec = self.inst.recorder
        obs = rec.observe(hit[0], hit[1], caller) if hit else None
        with rec.explaining(obs):
            result = func(*args, **kwargs)
        if self.inst.gpu and hit is None:
            late = classify.random_result_on_host(name, result)
            if late:
                rec.observe(late[0], late[1], caller)
        return result


class OpMode(TorchDispatchMode):
    def __init__(self, inst: "Instrumentation"):
        super().__init__()
        self.inst = inst
        self.trace: list[OpRecord] = []
        self.external: dict[int, ExternalInput] = {}
        self._made: dict[int, "weakref.ref[torch.Tensor]"] = {}
        self.mutated: dict[int, "weakref.ref[torch.Tensor]"] = {}  # tensors from before the run written in place

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        inst = self.inst
        here = sys._getframe(1)
        caller = frames.user_frame(here)
        hit = classify.library_hit(classify.classify_op(func, args, kwargs, gpu=inst.gpu), here, caller)
        if hit:
            explained = inst.recorder.explained_by
            if explained is not None:
                explained.add(f"ran aten.{classify.op_name(func)}")
            else:
                inst.recorder.observe(hit[0], hit[1], caller or here)
        if inst.track_inputs:
            self._note_inputs(func, args, kwargs, caller)
        self._note_writes(func, args)
        out = func(*args, **kwargs)
        outs = [o for o in _flat(out if isinstance(out, (tuple, list)) else (out,)) if isinstance(o, torch.Tensor)]
        for o in outs:
            self._made[id(o)] = weakref.ref(o)
        if inst.trace_ops and len(self.trace) < _MAX_TRACE:
            shapes = tuple(tuple(o.shape) for o in outs)
            code, line = (caller.f_code, caller.f_lineno) if caller else (None, 0)
            self.trace.append(OpRecord(classify.op_name(func), shapes, code, line))
        return out

    def _note_writes(self, func, args) -> None:
        schema = getattr(func, "_schema", None)
        if schema is None or not schema.is_mutable:
            return
        for arg, spec in zip(args, schema.arguments):
            if isinstance(arg, torch.Tensor) and spec.alias_info is not None and spec.alias_info.is_write:
                made = self._made.get(id(arg))
                if made is None or made() is not arg:
                    self.mutated[id(arg)] = weakref.ref(arg)

    def _note_inputs(self, func, args, kwargs, caller) -> None:
        for t in _flat(list(args) + list(kwargs.values())):
            if not isinstance(t, torch.Tensor) or t.device.type != "cuda":
                continue
            made = self._made.get(id(t))
            if made is not None and made() is t:
                continue
            base = t._base if t._base is not None else t
            if id(base) in self.external:
                continue
            code, line = (caller.f_code, caller.f_lineno) if caller else (None, 0)
            self.external[id(base)] = ExternalInput(
                weakref.ref(base), base.data_ptr(), tuple(base.shape), classify.op_name(func), code, line
            )
