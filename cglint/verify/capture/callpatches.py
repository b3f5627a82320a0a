"""The torch calls a GPU capture classifies, seen through wrapped attributes instead of a
TorchFunctionMode.

A TorchFunctionMode sends every torch call of the capture through Python: over the 8 captures
of a 24-layer decoder (bench/verify_overhead.py) that was 9,000 calls and half the bare capture
time again. classify_call can only report the names in classify.CALL_NAMES and calls given
generator= or pin_memory=, so the capture wraps just those tensor methods and torch functions
while it runs and every other operator stays at C speed.

A torch function the user's modules bound to a name of their own (`from torch import nonzero`)
is wrapped there too. What the wrappers cannot see and the mode does: such a name in a module
imported during the capture, or one kept elsewhere (a dict of functions). On a GPU a sync among
those still fails the capture under sync debug mode, which locates it; the API and the CPU
trace mode keep the mode.
"""
from __future__ import annotations

import sys
import threading
from types import ModuleType
from typing import TYPE_CHECKING, Any, Callable, Iterator

import torch

from cglint import vocabulary
from cglint.verify.capture import classify
from cglint.verify.findings import frames
from cglint.verify.capture.attributes import Patched
from cglint.verify.capture.torchmodes import observe_call

if TYPE_CHECKING:
    from cglint.verify.capture.instrument import Instrumentation

# torch functions and tensor methods that take generator= or pin_memory= without being named
# in CALL_NAMES (`torch.multinomial(p, 1, generator=g)` and `p.multinomial(1, generator=g)`).
_KWARG_CALLABLES = vocabulary.runtime_names("factories.keyword_takers")


def _targets() -> list[tuple[Any, str]]:
    """(owner, attribute) of every callable to wrap, on torch.Tensor and on torch."""
    names = sorted(classify.CALL_NAMES.union(_KWARG_CALLABLES))
    return [(owner, name) for owner in (torch.Tensor, torch) for name in names
            if callable(getattr(owner, name, None)) and not isinstance(getattr(owner, name), type)]


class CallPatches:
    """Wrap the classified torch callables while `inst` runs; `stop` puts every attribute back
    as it was (a name torch.Tensor only inherits is deleted again, not left as a copy)."""

    def __init__(self, inst: "Instrumentation"):
        self.inst = inst
        self._patched = Patched()
        self.inside = False  # running a wrapped call: what it calls of torch's is its own work

    def start(self) -> "CallPatches":
        if not _wrappers:
            _wrappers.update(dict.fromkeys(_targets(), (None, None)))
        _active.append(self)
        # id of a torch function -> its wrapper (`_wrappers` holds the functions: an id is theirs)
        functions: dict[int, Callable] = {}
        for (owner, name), (original, wrapper) in _wrappers.items():
            current = getattr(owner, name)
            if current is not original:  # first use, or someone else patched it since
                original, wrapper = _wrappers[owner, name] = current, _wrap(name, current, name in classify.CALL_NAMES)
            self._patched.set(owner, name, wrapper)
            if owner is torch:
                functions[id(original)] = wrapper
        for module, alias in _user_aliases(functions):
            wrapper = functions.get(id(vars(module).get(alias)))
            if wrapper is not None:  # still bound to the torch function
                self._patched.set(module, alias, wrapper)
        return self

    def stop(self) -> None:
        self._patched.restore()
        if self in _active:
            _active.remove(self)


# Made once per process, as a capture would spend 0.5 ms making them: (owner, name) -> (original, wrapper).
_wrappers: dict[tuple[Any, str], tuple[Any, Any]] = {}
_active: list[CallPatches] = []  # the innermost instrumented run is the last


# The names each of the user's modules binds to a wrapped torch function, found the first time
# the module is seen: (module name, id of the module) -> names.
_aliases: dict[tuple[str, int], tuple[str, ...]] = {}


def _user_aliases(functions: dict[int, Any]) -> Iterator[tuple[ModuleType, str]]:
    if len(sys.modules) == _last_scan[0]:  # no import since: a serving engine's next batch size
        yield from _last_scan[1]
        return
    found_now: list[tuple[ModuleType, str]] = []
    for name, module in list(sys.modules.items()):
        key = (name, id(module))
        found = _aliases.get(key)
        if found is None:
            # The module's own dict, as frames.is_user_module reads it: a lazily loaded module
            # would run its code, inside the capture, on an attribute read.
            space = object.__getattribute__(module, "__dict__") if frames.is_user_module(module) else {}
            found = _aliases[key] = tuple(k for k, v in list(space.items()) if id(v) in functions)
        found_now += [(module, alias) for alias in found]
    _last_scan[:] = [len(sys.modules), found_now]
    yield from found_now


_last_scan: list[Any] = [-1, []]  # (len(sys.modules) then, what the scan found)


def _wrap(name: str, original: Callable, named: bool) -> Callable:
    call_kwargs = classify.CALL_KWARGS

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        patches = _active[-1] if _active else None
        # Other threads run while a capture does (data loaders): only the capturing one counts.
        if patches is not None and (named or (kwargs and not call_kwargs.isdisjoint(kwargs))) \
                and not patches.inside and threading.get_ident() == patches.inst.thread:
            # `print(t)` reaches `.item()` inside Tensor.__repr__: torch's work for the one call
            # recorded, as the TorchFunctionMode never sees calls inside the call it handles.
            patches.inside = True
            try:
                return observe_call(patches.inst, original, name, args, kwargs, sys._getframe(1))
            finally:
                patches.inside = False
        return original(*args, **kwargs)

    wrapper.__name__ = wrapper.__qualname__ = name
    # The host tracer stops watching call sites of torch's own callables (hosttrace._torch_work).
    wrapper.__module__ = "torch"
    wrapper.__doc__ = getattr(original, "__doc__", None)
    return wrapper
