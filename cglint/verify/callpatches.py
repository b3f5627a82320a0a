"""The torch calls a GPU capture classifies, seen through wrapped attributes instead of a
TorchFunctionMode.

A TorchFunctionMode sends every torch call of the capture through Python: over the 8 captures
of a 24-layer decoder (bench/verify_overhead.py) that was 9,000 calls and half the bare capture
time again. classify_call can only report the names in classify.CALL_NAMES and calls given
generator= or pin_memory=, so the capture wraps just those tensor methods and torch functions
while it runs and every other operator stays at C speed.

What the wrappers cannot see and the mode does: a torch function bound to another name before
the capture (`from torch import nonzero`). On a GPU a sync among those still fails the capture
under sync debug mode, which locates it; the API and the CPU trace mode keep the mode.
"""
from __future__ import annotations

import sys
import threading
from typing import TYPE_CHECKING, Any, Callable

import torch

from cglint.verify import classify
from cglint.verify.attributes import Patched
from cglint.verify.torchmodes import observe_call

if TYPE_CHECKING:
    from cglint.verify.instrument import Instrumentation

# torch functions that take generator= or pin_memory= without being named in CALL_NAMES.
_KWARG_FUNCTIONS = ("empty", "zeros", "ones", "full", "arange", "empty_strided", "empty_like", "zeros_like",
                    "ones_like", "full_like", "rand_like", "randn_like", "randint_like", "multinomial",
                    "bernoulli", "poisson")


def _targets() -> list[tuple[Any, str]]:
    """(owner, attribute) of every callable to wrap."""
    found = [(torch.Tensor, name) for name in sorted(classify.CALL_NAMES) if callable(getattr(torch.Tensor, name, None))]
    for name in sorted(classify.CALL_NAMES.union(_KWARG_FUNCTIONS)):
        if callable(getattr(torch, name, None)) and not isinstance(getattr(torch, name), type):
            found.append((torch, name))
    return found


class CallPatches:
    """Wrap the classified torch callables while `inst` runs; `stop` puts every attribute back
    as it was (a name torch.Tensor only inherits is deleted again, not left as a copy)."""

    def __init__(self, inst: "Instrumentation"):
        self.inst = inst
        self._patched = Patched()
        self.inside = False  # running a wrapped call: what it calls of torch's is its own work

    def start(self) -> "CallPatches":
        if not _wrappers:
            _wrappers.update({(owner, name): (None, None) for owner, name in _targets()})
        _active.append(self)
        for (owner, name), (original, wrapper) in _wrappers.items():
            current = getattr(owner, name)
            if current is not original:  # first use, or someone else patched it since
                original, wrapper = _wrappers[owner, name] = current, _wrap(name, current, name in classify.CALL_NAMES)
            self._patched.set(owner, name, wrapper)
        return self

    def stop(self) -> None:
        self._patched.restore()
        if self in _active:
            _active.remove(self)


# Made once per process, as a capture would spend 0.5 ms making them: (owner, name) -> (original, wrapper).
_wrappers: dict[tuple[Any, str], tuple[Any, Any]] = {}
_active: list[CallPatches] = []  # the innermost instrumented run is the last


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
