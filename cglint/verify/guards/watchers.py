"""Watchers: writes to nn.Module attributes and `.data` of parameters, seen for a whole verify session.

A replay guard on a module attribute is not re-read before every replay: while the verifier
runs, `Module.__setattr__` and the `.data` setter of parameters are wrapped, and a write to
a subscribed (module, attribute) marks the guard sets that depend on it, with the line that
wrote it (GuardSet.written). A parameter or buffer rebound inside a captured region is
reported at once (CG401). Writes that bypass `__setattr__` (`vars(module)[k] = v`) are not
seen.
"""
from __future__ import annotations

import functools
import sys
import weakref
from typing import TYPE_CHECKING, Any, Callable, Iterable, Optional

import torch

from cglint.findings import Related
from cglint.verify.findings import frames
from cglint.verify.capture.attributes import Patched
from cglint.verify.findings import rule_codes as rc

if TYPE_CHECKING:
    from cglint.verify.guards.collector import GuardReadCollector
    from cglint.verify.guards.guardset import GuardSet

collecting: list["GuardReadCollector"] = []  # the collectors of captures running now (innermost last)
_subscribers: dict[Any, dict[int, "weakref.ref[GuardSet]"]] = {}
_data_subscribers: dict[int, dict[int, "weakref.ref[GuardSet]"]] = {}
_patched = Patched()
_TENSOR_DATA = torch._C.TensorBase.__dict__["data"]


def installed() -> bool:
    return bool(_patched)


def subscribe(guards: "GuardSet", keys: Iterable[tuple[int, str]] = (), tensors: Iterable[int] = ()) -> None:
    """Tell `guards` of writes to these (id(module), attribute) keys and of `.data` assignments to
    the tensors with these ids. Dicts of weak references, not WeakSets: every capture subscribes
    each parameter of the modules that ran, and WeakSet.add was a tenth of a decoder capture's
    instrumentation."""
    me, ref = id(guards), guards.ref
    for key in keys:
        (_subscribers.get(key) or _subscribers.setdefault(key, {}))[me] = ref
    for tensor in tensors:
        (_data_subscribers.get(tensor) or _data_subscribers.setdefault(tensor, {}))[me] = ref


def _live(subs: dict[int, "weakref.ref[GuardSet]"]) -> list["GuardSet"]:
    """The guard sets still alive in a subscription, forgetting those that are gone."""
    found = []
    for key, ref in list(subs.items()):
        guards = ref()
        if guards is None:
            del subs[key]
        else:
            found.append(guards)
    return found


def _writer() -> Optional[Related]:
    frame = frames.user_frame(sys._getframe(2))
    if frame is None:
        return None
    w = frames.where(frame)
    return Related(frames.display_path(w.path), w.line, w.column, "the value is changed here")


def _module_setattr(original: Callable) -> Callable:
    def __setattr__(self: torch.nn.Module, name: str, value: Any) -> None:
        if collecting and isinstance(value, torch.Tensor):
            _rebound_in_capture(self, name, value)
        original(self, name, value)
        _notify(self, name, value)

    return __setattr__


def _notify(owner: Any, name: str, value: Any) -> None:
    """Tell the guard sets watching `owner.name` that it was written, and by which user line."""
    if _subscribers:
        key = (id(owner), name)
        subs = _subscribers.get(key)
        if subs:
            writer = _writer()
            for guards in _live(subs):
                guards.written(key, value, writer)


def _rebound_in_capture(module: torch.nn.Module, name: str, value: torch.Tensor) -> None:
    stores = [module.__dict__.get("_buffers") or {}, module.__dict__.get("_parameters") or {}]
    old = next((s[name] for s in stores if name in s), None)
    if old is None or old is value:
        return
    collector = collecting[-1]
    kind = "buffer" if name in stores[0] else "parameter"
    collector.recorder.observe(
        rc.REBIND_CAPTURED_TENSOR,
        f"{kind} `{name}` of {type(module).__name__} is rebound inside the captured region; replays read the tensor "
        "bound before the capture and write the one bound during it, so the state eager calls would carry "
        "from step to step does not advance",
        sys._getframe(2),
    )


def _data_get(self: torch.Tensor) -> torch.Tensor:
    return _TENSOR_DATA.__get__(self, type(self))


def _data_set(self: torch.Tensor, value: torch.Tensor) -> None:
    _TENSOR_DATA.__set__(self, value)
    subs = _data_subscribers.get(id(self)) if _data_subscribers else None
    if subs:
        writer = _writer()
        for guards in _live(subs):
            guards.data_written(self, writer)


def _module_register(original: Callable) -> Callable:
    """`register_buffer(name, t)` and `register_parameter(name, p)` store into `_buffers` and
    `_parameters` without `__setattr__` (transformers' dynamic RoPE rebinds `inv_freq` so): the
    same watch as an assignment."""
    def register(self: torch.nn.Module, name: str, tensor: Any, *args: Any, **kwargs: Any) -> None:
        if collecting and isinstance(tensor, torch.Tensor):
            _rebound_in_capture(self, name, tensor)
        original(self, name, tensor, *args, **kwargs)
        _notify(self, name, tensor)

    return register


# --- attributes of plain objects (a dataclass field, a config object's attribute) ---------------
# A guard that read `params.temperature` from a plain object names the line that wrote it: from the
# end of the capture on, the object's class has a `__setattr__` that calls the one it had and, for
# the (object, attribute) pairs some guard read, keeps the user line that wrote last. The class and
# its instances keep their types; only classes of objects a capture read get one, and a write to an
# attribute no guard read costs a dict lookup.
_object_keys: dict[tuple[int, str], Optional[Related]] = {}  # (id(object), attribute) -> the last writer
_object_refs: dict[int, Callable[[], Any]] = {}  # the watched objects, to drop their keys when they go
_watched_classes: set[type] = set()
_unwatchable: set[type] = set()


def _object_setattr(original: Callable) -> Callable:
    def __setattr__(self: Any, name: str, value: Any) -> None:
        original(self, name, value)
        if _object_keys:
            key = (id(self), name)
            if key in _object_keys:
                _object_keys[key] = _writer()

    return __setattr__


def watch_object(obj: Any, name: str) -> bool:
    """Keep the line that writes `obj.name` from now on (last_write). False when the object's class
    cannot be watched (a builtin type, an nn.Module: those are watched by `install` already)."""
    if not _patched:
        return False
    cls = type(obj)
    if cls in _unwatchable or isinstance(obj, (type, torch.nn.Module, torch.Tensor)):
        return False
    if cls not in _watched_classes:
        try:
            original = cls.__setattr__
            _patched.set(cls, "__setattr__", functools.wraps(original)(_object_setattr(original)))
        except (TypeError, AttributeError):  # a builtin or extension type
            _unwatchable.add(cls)
            return False
        _watched_classes.add(cls)
    ident = id(obj)
    if ident not in _object_refs:
        try:
            _object_refs[ident] = weakref.ref(obj, functools.partial(_forget_object, ident))
        except TypeError:  # no weak references (a class with __slots__): watched while the session lasts
            _object_refs[ident] = lambda: obj
    _object_keys.setdefault((ident, name), None)
    return True


def _forget_object(ident: int, _ref: Any = None) -> None:
    _object_refs.pop(ident, None)
    for key in [k for k in _object_keys if k[0] == ident]:
        del _object_keys[key]


def last_write(obj: Any, name: str) -> Optional[Related]:
    """The user line that last assigned `obj.name` since it was watched (watch_object), if any."""
    return _object_keys.get((id(obj), name))


def install() -> None:
    """Watch writes to modules and parameters for the rest of the session."""
    if _patched:
        return
    module_cls, param_cls = torch.nn.Module, torch.nn.Parameter
    _patched.set(module_cls, "__setattr__", functools.wraps(module_cls.__setattr__)(_module_setattr(module_cls.__setattr__)))
    for name in ("register_buffer", "register_parameter"):
        original = getattr(module_cls, name)
        _patched.set(module_cls, name, functools.wraps(original)(_module_register(original)))
    _patched.set(param_cls, "data", property(_data_get, _data_set, doc=_TENSOR_DATA.__doc__))


def uninstall() -> None:
    _patched.restore()
    _subscribers.clear()
    _data_subscribers.clear()
    _object_keys.clear()
    _object_refs.clear()
    _watched_classes.clear()
    _unwatchable.clear()
    for forget in _at_uninstall:
        forget()


# What forgets state that relies on this session's watching (the collector's shared guards).
_at_uninstall: list[Callable[[], None]] = []


def at_uninstall(forget: Callable[[], None]) -> None:
    _at_uninstall.append(forget)
