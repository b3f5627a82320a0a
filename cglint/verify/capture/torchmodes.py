"""The two torch hooks of an instrumented run.

ApiMode (a TorchFunctionMode) sees each torch call with its Python arguments and records
API-level hazards. OpMode (a TorchDispatchMode) sees each ATen operator: it records the
operator sequence and shapes (to compare two inputs), the tensors from before the run it
writes in place, and hazards hidden in library code.
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

from cglint import vocabulary
from cglint.verify.capture import classify
from cglint.verify.findings import frames

if TYPE_CHECKING:
    from cglint.verify.capture.instrument import Instrumentation

# Operators recorded per traced pass (compared between two passes): a large model's forward
# dispatches a few thousand; this bounds the memory of a pass that loops in Python.
_MAX_TRACE = 200_000
# The host tracer (setprofile) and the guard collector (settrace) see every call and builtin
# the modes' own bookkeeping makes: not the user's work, and tracing it made an instrumented
# capture many times slower than a bare one. The handlers switch both off around it; only
# the verifier's own hooks (a debugger's or profiler's cannot always be set back from Python).
_getprofile, _setprofile, _gettrace, _settrace = sys.getprofile, sys.setprofile, sys.gettrace, sys.settrace
own_hooks: set[Any] = set()  # the host tracer's profile function, the guard collector's trace function


@dataclass(frozen=True)
class OpRecord:
    op: str
    shapes: tuple
    code: Optional[CodeType]
    line: int

    def where(self) -> str:
        path = frames.display_path(self.code.co_filename) if self.code else "?"
        return f"{path}:{self.line}"


def _flat(values: Any):
    for v in values:
        if isinstance(v, (list, tuple)):
            yield from _flat(v)
        else:
            yield v


@dataclass(frozen=True)
class _OpFacts:
    """What the dispatch hook needs to know of an operator, worked out once per operator."""

    name: str
    may_hit: bool  # classify_op can report it
    writes: tuple[int, ...]  # positions of the arguments it writes in place


_facts: dict[Any, _OpFacts] = {}


def _op_facts(func: Any) -> _OpFacts:
    facts = _facts.get(func)
    if facts is None:
        name = classify.op_name(func)
        schema = getattr(func, "_schema", None)
        writes = tuple(i for i, spec in enumerate(schema.arguments)
                       if spec.alias_info is not None and spec.alias_info.is_write) if schema is not None else ()
        facts = _facts[func] = _OpFacts(name, name in classify.OP_NAMES, writes)
    return facts


class ApiMode(TorchFunctionMode):
    def __init__(self, inst: "Instrumentation"):
        super().__init__()
        self.inst = inst

    def __torch_function__(self, func, types, args=(), kwargs=None):
        profile, trace = _mute()
        try:
            name = getattr(func, "__name__", "")
            if name in classify.CALL_NAMES or (kwargs and not classify.CALL_KWARGS.isdisjoint(kwargs)):
                return observe_call(self.inst, func, name or str(func), args, kwargs or {}, sys._getframe(1))
            if name in _RUNS_USER_CODE:
                profile, trace = _unmute(profile, trace)
            # The call runs torch's own code (its operators reach OpMode), untraced: the host tracer
            # and the guard collector are for the user's frames.
            return func(*args, **(kwargs or {}))
        finally:
            _unmute(profile, trace)


def observe_call(inst: "Instrumentation", func: Any, name: str, args: tuple, kwargs: dict, caller: Any) -> Any:
    """Run a torch call that classify_call may report, recording it when it is a hazard.
    `caller` is the frame that made the call (the user's, or torch's own code)."""
    user = frames.user_frame(caller) if name == "__bool__" else None
    try:
        hit = classify.classify_call(name, args, kwargs, gpu=inst.gpu, frame=user,
                                     owned_generators=inst.owned_generators)
    except Exception:  # noqa: BLE001 - arguments the classifier does not expect: the call itself decides
        hit = None
    rec = inst.recorder
    obs = None
    if hit:
        hit = classify.library_hit(hit, caller, user or frames.user_frame(caller))
        obs = rec.observe(hit[0], hit[1], caller)
    if obs is None:
        result = func(*args, **kwargs)
    else:
        with rec.explaining(obs):
            result = func(*args, **kwargs)
    if inst.gpu and hit is None and name in classify.RANDOM_FACTORIES:
        late = classify.random_result_on_host(name, result)
        if late:
            rec.observe(late[0], late[1], caller)
    return result


# Torch calls that run the user's Python inside them (backward hooks, custom autograd functions):
# the tracers stay on for those.
_RUNS_USER_CODE = vocabulary.runtime_names("values.runs_user_code")


def _mute() -> tuple[Any, Any]:
    """Switch off our own host tracer and guard collector (not a debugger's) while torch's code
    runs; `_unmute` puts back what this returns."""
    profile, trace = _getprofile(), _gettrace()
    profile = profile if profile in own_hooks else None
    trace = trace if trace in own_hooks else None
    if profile is not None:
        _setprofile(None)
    if trace is not None:
        _settrace(None)
    return profile, trace


def _unmute(profile: Any, trace: Any) -> tuple[None, None]:
    if trace is not None:
        _settrace(trace)
    if profile is not None:
        _setprofile(profile)
    return None, None


class OpMode(TorchDispatchMode):
    def __init__(self, inst: "Instrumentation"):
        super().__init__()
        self.inst = inst
        self.trace: list[OpRecord] = []
        self._made: dict[int, "weakref.ref[torch.Tensor]"] = {}
        self.mutated: dict[int, "weakref.ref[torch.Tensor]"] = {}  # tensors from before the run written in place

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        profile, trace = _mute()
        kwargs = kwargs or {}
        inst = self.inst
        facts = _facts.get(func) or _op_facts(func)
        if facts.may_hit:
            hit = classify.classify_op(func, args, kwargs, gpu=inst.gpu)
            if hit:
                here = sys._getframe(1)
                hit = classify.library_hit(hit, here, frames.user_frame(here))
                explained = inst.recorder.explained_by
                if explained is not None:
                    explained.add(f"ran aten.{facts.name}")
                else:
                    inst.recorder.observe(hit[0], hit[1], frames.user_frame(here) or here)
        made = self._made
        for i in facts.writes:
            arg = args[i] if i < len(args) else None
            if isinstance(arg, torch.Tensor):
                seen = made.get(id(arg))
                if seen is None or seen() is not arg:
                    self.mutated[id(arg)] = weakref.ref(arg)
        if trace is not None:
            _settrace(trace)
        if profile is not None:
            _setprofile(profile)
        out = func(*args, **kwargs)
        if type(out) is torch.Tensor:  # most operators: one plain tensor out
            made[id(out)] = weakref.ref(out)
            outs: Any = (out,)
        else:
            outs = [o for o in _flat(out if isinstance(out, (tuple, list)) else (out,)) if isinstance(o, torch.Tensor)]
            for o in outs:
                made[id(o)] = weakref.ref(o)
        if inst.trace_ops and len(self.trace) < _MAX_TRACE:
            shapes = tuple(tuple(o.shape) for o in outs)
            caller = frames.user_frame(sys._getframe(1))
            code, line = (caller.f_code, caller.f_lineno) if caller else (None, 0)
            self.trace.append(OpRecord(facts.name, shapes, code, line))
        return out
