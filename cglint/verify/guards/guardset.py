"""Replay guards: the Python values a capture read, checked before every replay.

TorchDynamo guards what a compiled frame read and recompiles when it changes; a CUDA graph
has no such check, so a temperature, `self.training`, a config field or a global changed
between replays is silently ignored by every replay. This module gives captures guards.

Collecting, during a capture only: collector.py follows the capture's frames and keeps the
reads whose value is a Python scalar (number, bool, str, None, enum, dtype, device, or a
short tuple of those): those reach tensor work, a branch, a loop bound, a slice or a shape;
objects and tensors are not values a replay freezes.

Checking, before each replay. Attributes of nn.Modules are watched rather than re-read
(watchers.py: a write to a guarded (module, attribute) marks the guards that depend on it,
with the line that wrote it). The other guards (globals, closure cells, attributes of
plain objects, container items) are re-read: one `is` comparison each, `==` only when
the identity changed. A replay whose guarded state was not written costs a truthiness test
and the re-read guards, typically a handful.

Parameters and buffers of the modules that ran are guarded by identity: rebinding one
(`.data =`, a new nn.Parameter, a buffer reassigned) is a CG401 finding at the rebinding
line; so is a buffer rebound inside the captured region itself. So are tensors the capture
read from a dict, a list or a plain object (`inputs["x"]`, `batch.x`: slots, re-read with one
`is` each), reported at the store that rebound them (writers.py).

A functools.partial the capture called is guarded by what it froze: its function, arguments
and keywords (PartialCall).
"""
from __future__ import annotations

import enum
import functools
import weakref
from dataclasses import dataclass
from types import FrameType
from typing import Any, Callable, Iterable, Optional

import torch

from cglint.findings import Related
from cglint.verify.findings import frames
from cglint.verify.guards import readplan, watchers, writers
from cglint.verify.findings import rule_codes as rc
from cglint.verify.findings.recorder import Observation, Recorder

_SCALAR_TYPES = frozenset({bool, int, float, complex, str, bytes, type(None), torch.dtype, torch.device})
# A tuple is guarded as a value when it is short (a shape, a few settings): a longer one is
# data, and comparing it before every replay would slow the replay loop.
_MAX_TUPLE = 16
# The rule of a guard, by how the capture used the value it read (readplan).
CODES = {readplan.VALUE: rc.code_of("frozen-host-value"), readplan.BRANCH: rc.code_of("branch-on-changing-host-state"),
          readplan.SLICE: rc.code_of("size-from-changing-host-state")}


def guardable(value: Any) -> bool:
    kind = type(value)
    if kind in _SCALAR_TYPES or isinstance(value, (enum.Enum, PartialCall)):
        return True
    if kind is tuple or kind is torch.Size:
        return len(value) <= _MAX_TUPLE and all(type(v) in _SCALAR_TYPES for v in value)
    return False


def same(a: Any, b: Any) -> bool:
    if a is b:
        return True
    if type(a) is not type(b):
        return False
    try:
        return bool(a == b) or (a != a and b != b)  # NaN stays NaN
    except Exception:  # noqa: BLE001 - a value whose comparison raises counts as changed
        return False


class PartialCall:
    """What a functools.partial freezes into a capture that calls it: its function (by identity),
    arguments and keywords (by value when scalars, else by identity). A partial rebound to an equal
    one is no change; its `.keywords` changed in place is."""

    __slots__ = ("func", "args", "keywords")
    __hash__ = None  # type: ignore[assignment]

    def __init__(self, p: functools.partial):
        self.func, self.args, self.keywords = p.func, p.args, dict(p.keywords)

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, PartialCall) and self.func is other.func and len(self.args) == len(other.args)
                and all(map(_part_same, self.args, other.args)) and self.keywords.keys() == other.keywords.keys()
                and all(_part_same(v, other.keywords[k]) for k, v in self.keywords.items()))

    def __repr__(self) -> str:
        parts = [getattr(self.func, "__name__", type(self.func).__name__), *map(repr, self.args)]
        return f"partial({', '.join(parts + [f'{k}={v!r}' for k, v in self.keywords.items()])})"


def _part_same(a: Any, b: Any) -> bool:
    return a is b or (type(a) is not PartialCall and guardable(a) and same(a, b))


def frozen(value: Any) -> Any:
    """The value a guard keeps for `value`: a partial's frozen call, else the value itself."""
    return PartialCall(value) if type(value) is functools.partial else value


@dataclass
class Slot:
    """A tensor the capture read from a dict, a list or a plain object's attribute."""

    text: str  # `inputs['x']`, `batch.x`
    where: frames.Where  # where the capture read it
    tensor: Callable[[], Any]  # a weak reference, or a holder of a container that takes none
    data_ptr: int
    fetch: Callable[[], Any]  # the slot's value now; raises when its holder is gone
    holder: Callable[[], Any]  # the dict, list or object
    step: tuple[str, Any]  # ("attr", name) or ("item", key)
    last: Any = None  # the value last reported
    # A container of static inputs (a dict, list or dataclass holding tensors) held in a container the
    # capture site passed (`**self.static_kwargs`): `tensor` returns it, and rebinding it is the finding.
    container: bool = False


@dataclass
class Guard:
    text: str  # `self.temperature`, `config.GUIDANCE`
    code: str
    where: frames.Where
    stack: Callable[[], tuple[str, ...]]  # the trace, resolved only when the guard reports (labels cost)
    captured: Any
    fetch: Callable[[], Any]  # the value now; raises when its object is gone
    writers: Callable[[], list[Related]] = lambda: []  # where a global is assigned (found statically)
    holder: Optional[Callable[[], Any]] = None  # the class, object or dict read last, and the key read from it:
    step: tuple = ()  # their writers are looked for when the value changed (writers.py)
    test: tuple = ()  # the test the code made of the value (readplan.derive): a change that keeps its outcome is none


@dataclass
class _Bound:
    """A parameter or buffer of a module that ran during the capture."""

    module: "weakref.ref[torch.nn.Module]"
    name: str
    tensor: "weakref.ref[torch.Tensor]"
    data_ptr: int


class GuardSet:
    """The guards of one capture and what the watchers saw written since."""

    def __init__(self, label: str):
        self.label = label
        self.polled: list[Guard] = []
        self.by_key: dict[tuple[int, str], list[Guard]] = {}
        self.dirty: dict[tuple[int, str], Optional[Related]] = {}  # watched keys written, with the writer
        self.bound: dict[tuple[int, str], _Bound] = {}
        self.bound_tensors: dict[int, _Bound] = {}
        self.events: list[tuple[frames.Where, tuple[str, ...], str, int]] = []  # rebinding seen by the watchers
        self._seen_keys: set[tuple] = set()
        self.changed: dict[int, tuple[Guard, Any]] = {}  # guards found changed, with their latest value
        # The last value each polled guard was checked against (its identity makes the common check
        # one `is`); kept here because captures share their Guard objects (GuardReadCollector._guard).
        self.last: dict[int, Any] = {}
        # Device tensors the capture site read by name (`static_x`, `self.static_x`): replays
        # check they are still the captured ones (liveness). Held until the capture ends.
        self.site_tensors: dict[str, torch.Tensor] = {}
        self.slots: list[Slot] = []
        self._read: list[tuple[Guard, list[tuple[int, str]]]] = []
        self.ref = weakref.ref(self)  # what the watchers' tables hold (see watchers.subscribe)

    def __len__(self) -> int:
        return len(self.polled) + len(self.slots) + sum(len(v) for v in self.by_key.values())

    @property
    def pending(self) -> bool:
        return bool(self.polled or self.dirty or self.events or self.slots)

    # --- building --------------------------------------------------------------
    def seen(self, identity: tuple) -> bool:
        """Whether this value was read before (the first read is where it is reported); marks it read."""
        if identity in self._seen_keys:
            return True
        self._seen_keys.add(identity)
        return False

    def add(self, guard: Guard, watched: list[tuple[int, str]]) -> None:
        self._read.append((guard, watched))

    def freeze(self) -> None:
        """At capture end: keep the values that still hold what was read (a loop variable of a frame
        still running moved on during the capture: it is not state a replay froze)."""
        for guard, watched in self._read:
            try:
                if not same(guard.fetch(), guard.captured):
                    continue
            except Exception:  # noqa: BLE001 - gone already
                continue
            _watch_holder(guard)
            if watched and watchers.installed() and type(guard.captured) is not PartialCall:  # keywords change in place
                for key in watched:
                    self.by_key.setdefault(key, []).append(guard)
                watchers.subscribe(self, watched)
            else:
                self.polled.append(guard)
        self._read = []
        self.slots = [slot for slot in self.slots if _holds(slot)]

    def slot(self, slot: Slot) -> None:
        self.slots.append(slot)

    def bind(self, modules: Iterable[torch.nn.Module]) -> None:
        if not watchers.installed():
            return  # rebinding is seen by the watchers only
        # Every parameter of every module that ran, at every capture (500 per capture of a decoder):
        # the loop stays plain.
        keys, tensors = [], []
        for module in modules:
            module_ref, module_id = weakref.ref(module), id(module)
            for store in (module._parameters, module._buffers):
                for name, t in store.items():
                    if not isinstance(t, torch.Tensor):
                        continue
                    try:
                        bound = _Bound(module_ref, name, weakref.ref(t), t.data_ptr())
                    except Exception:  # noqa: BLE001 - a tensor without storage (meta, fake)
                        continue
                    key = (module_id, name)
                    self.bound[key] = self.bound_tensors[id(t)] = bound
                    keys.append(key)
                    tensors.append(id(t))
        watchers.subscribe(self, keys, tensors)

    def parameters(self) -> list[tuple[str, "weakref.ref[torch.Tensor]", int]]:
        """(label, weak reference, data_ptr) of the parameters and buffers of the modules that ran."""
        found = []
        for bound in self.bound.values():
            owner = bound.module()
            found.append((f"`{bound.name}` of {type(owner).__name__}" if owner is not None else f"`{bound.name}`",
                          bound.tensor, bound.data_ptr))
        return found

    # --- what the watchers report ----------------------------------------------
    def written(self, key: tuple[int, str], value: Any, writer: Optional[Related]) -> None:
        if key in self.by_key:
            self.dirty[key] = writer
        bound = self.bound.get(key)
        if bound is not None and writer is not None and value is not bound.tensor():
            owner = bound.module()
            what = f"`{bound.name}` of {type(owner).__name__}" if owner is not None else f"`{bound.name}`"
            self.events.append((_where(writer), (), f"{what} is rebound to another tensor after the capture at "
                                f"{self.label}; the graph keeps reading the captured one", bound.data_ptr))

    def data_written(self, t: torch.Tensor, writer: Optional[Related]) -> None:
        bound = self.bound_tensors.get(id(t))
        if bound is None or writer is None or bound.tensor() is not t or t.data_ptr() == bound.data_ptr:
            return
        owner = bound.module()
        what = f"`{bound.name}` of {type(owner).__name__}" if owner is not None else "a captured parameter"
        self.events.append((_where(writer), (), f"`.data` assignment moves {what} to new memory after the capture at "
                            f"{self.label}; the graph keeps reading the old memory", bound.data_ptr))

    # --- the check ---------------------------------------------------------------
    def _rebound(self, slot: Slot, recorder: Recorder, frame: Optional[FrameType]) -> None:
        """A slot that holds another tensor: reported at the store that rebound it where it is found."""
        try:
            related, certain = writers.find(slot.holder(), slot.step[0], slot.step[1], frame, _holder_name(slot.text))
        except Exception:  # noqa: BLE001 - where it was written is never worth breaking a replay
            related, certain = [], False
        read = f"{frames.display_path(slot.where.path)}:{slot.where.line}"
        what = (f"`{slot.text}` is rebound to another tensor after the capture at {self.label}, which read it at "
                f"{read}; the graph keeps reading the captured tensor")
        if slot.container:
            kind = type(slot.tensor()).__name__
            what = (f"`{slot.text}` (a {kind} of tensors the capture at {self.label} read, passed at {read}) is rebound "
                    f"to another object instead of copied into; the graph keeps reading the captured tensors")
        obs: Optional[Observation]
        if certain or len(related) == 1:
            obs = recorder.observe_at(rc.REBIND_CAPTURED_TENSOR, what, _where(related[0]), (),
                                      evidence=_replay_note(frame))
        else:
            obs = recorder.observe(rc.REBIND_CAPTURED_TENSOR, what, frame)
            if obs is not None:
                for r in related[:3]:
                    obs.relate(r)

    def check(self, recorder: Recorder, frame: Optional[FrameType]) -> set[int]:
        """Record what changed since capture; returns the data_ptrs of rebound tensors it reported."""
        explained: set[int] = set()
        for guard in self.polled:
            try:
                now = guard.fetch()
            except Exception:  # noqa: BLE001 - its object is gone: nothing left to guard
                continue
            if now is not self.last.get(id(guard), guard.captured):
                self.last[id(guard)] = now
                if differs(guard, now):
                    self.changed[id(guard)] = (guard, now)
                    _report(guard, now, recorder, frame, _writers(guard, frame))
        if self.dirty:
            dirty, self.dirty = self.dirty, {}
            done: set[int] = set()
            for key, writer in dirty.items():
                for guard in self.by_key.get(key, ()):
                    if id(guard) in done:
                        continue
                    done.add(id(guard))
                    try:
                        now = guard.fetch()
                    except Exception:  # noqa: BLE001
                        continue
                    self.last[id(guard)] = now
                    if differs(guard, now):
                        self.changed[id(guard)] = (guard, now)
                        _report(guard, now, recorder, frame, [writer] if writer else [])
        moved: list[str] = []  # containers found rebound: what they held is explained by them
        for slot in self.slots:
            try:
                now = slot.fetch()
            except Exception:  # noqa: BLE001 - its holder is gone
                continue
            if now is slot.tensor() or not (slot.container or isinstance(now, torch.Tensor)):
                continue
            if slot.container:
                moved.append(slot.text)
            if now is slot.last or any(slot.text.startswith((m + ".", m + "[")) for m in moved):
                continue
            slot.last = now
            self._rebound(slot, recorder, frame)
            explained.add(slot.data_ptr)
        if self.events:
            events, self.events = self.events, []
            replay = _replay_note(frame)
            for where, trace, what, data_ptr in events:
                recorder.observe_at(rc.REBIND_CAPTURED_TENSOR, what, where, trace, evidence=replay)
                explained.add(data_ptr)
        return explained


def explanation(changes: Iterable[tuple[Guard, Any]]) -> tuple[str, list[Related]]:
    """Words and related locations for a replay that diverged: the guarded values that changed since
    the capture, each with its value at capture, its value now and the line that read it."""
    parts, related = [], []
    for guard, now in changes:
        w = guard.where
        path = frames.display_path(w.path)
        change = f"{_shown(guard.captured)} at capture, {_shown(now)} now"
        parts.append(f"`{guard.text}` ({change}; read at {path}:{w.line})")
        related.append(Related(path, w.line, w.column, f"`{guard.text}` is read here: {change}"))
    if not parts:
        return "", []
    return "; explained by what the capture froze: " + ", ".join(parts[:3]), related[:3]


def differs(guard: Guard, now: Any) -> bool:
    """Whether what the capture made of the guarded value would differ now: the value itself, or the
    outcome of the test the code made of it (`offset == 0` stays False while the offset moves on)."""
    if same(now, guard.captured):
        return False
    if not guard.test:
        return True
    return not same(readplan.derive(guard.test, now), readplan.derive(guard.test, guard.captured))


def _watch_holder(guard: Guard) -> None:
    """From the end of the capture on, keep the line that writes the plain object's attribute a guard
    read (`params.temperature`): its class gets a `__setattr__` that notes the writer (watchers)."""
    if guard.holder is None or not guard.step or guard.step[0] != "attr" or not watchers.installed():
        return
    try:
        holder = guard.holder()
    except Exception:  # noqa: BLE001 - gone already
        return
    if isinstance(holder, (type, dict, list, tuple)):
        return
    watchers.watch_object(holder, guard.step[1])


def _writers(guard: Guard, frame: Optional[FrameType]) -> list[Related]:
    """Where a changed guard's value was written: the line the watchers saw write it, else the stores
    found in the code (writers.py)."""
    if guard.holder is not None and guard.step and guard.step[0] == "attr":
        try:
            seen = watchers.last_write(guard.holder(), guard.step[1])
        except Exception:  # noqa: BLE001 - gone
            seen = None
        if seen is not None:
            return [seen]
    return guard.writers() or _stores_to(guard, frame)


def _stores_to(guard: Guard, frame: Optional[FrameType]) -> list[Related]:
    """Where the class, object or dict entry a guard read may have been written."""
    holder = guard.holder() if guard.holder is not None else None
    if holder is None or not guard.step:
        return []
    try:
        related, certain = writers.find(holder, guard.step[0], guard.step[1], frame, _holder_name(guard.text))
    except Exception:  # noqa: BLE001 - an explanation is never worth a crash
        return []
    return related[:1] if certain else related


def _holds(slot: Slot) -> bool:
    try:
        return slot.fetch() is slot.tensor()
    except Exception:  # noqa: BLE001 - gone already
        return False


def _where(related: Related) -> frames.Where:
    return frames.Where(related.path, related.line, related.column, related.line, 0)


def _replay_note(frame: Optional[FrameType]) -> str:
    if frame is None:
        return "seen before replay"
    return f"seen before the replay at {frames.display_path(frame.f_code.co_filename)}:{frame.f_lineno}"


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _report(guard: Guard, now: Any, recorder: Recorder, frame: Optional[FrameType], writers: list[Related]) -> None:
    then = _shown(guard.captured)
    if guard.code == CODES[readplan.BRANCH]:
        effect = "the branch or loop here took its path at capture, and every replay repeats it"
    elif guard.code == CODES[readplan.SLICE]:
        effect = "the slice here keeps the extent it had at capture"
    else:
        effect = f"the graph keeps using {then}"
    if guard.test:
        effect = (f"`{_test_text(guard)}` was {readplan.derive(guard.test, guard.captured)} at capture and is "
                  f"{readplan.derive(guard.test, now)} now; {effect}")
    written = f" (set at {writers[0].path}:{writers[0].line})" if writers else ""
    what = f"`{guard.text}` was {then} at capture and is {_shown(now)} before this replay{written}; {effect}"
    obs = recorder.observe_at(guard.code, what, guard.where, guard.stack(), evidence=_replay_note(frame))
    if obs.what != what and not obs.what.startswith(f"`{guard.text}`"):
        obs.add(f"also {what.split(';')[0]}")  # another value read on the same line
    for related in writers[:3]:
        obs.relate(related)


def _test_text(guard: Guard) -> str:
    text = guard.text
    for op in guard.test:
        if op[0] == "cmp":
            text = f"{text} {op[1]} {op[2]!r}"
        elif op[0] == "is":
            text = f"{text} is{' not' if op[1] else ''} {op[2]!r}"
        elif op[0] == "in":
            text = f"{text}{' not' if op[1] else ''} in {op[2]!r}"
        elif op[0] == "bin":
            text = f"({text} {op[1]} {op[2]!r})"
        elif op[0] == "neg":
            text = f"-{text}"
        elif op[0] == "not":
            text = f"not {text}"
        elif op[0] == "truth":
            text = f"bool({text})"
        elif op[0] == "none":
            text = f"{text} is None"
    return text


def _holder_name(text: str) -> Optional[str]:
    """The name the holder of a read's last step was reached by: `scalings` of `self.mgr.scalings[0]`,
    `group` of `group['lr']`."""
    head = text.rsplit("[", 1)[0] if text.endswith("]") else text.rsplit(".", 1)[0]
    name = head.rsplit(".", 1)[-1].rsplit("[", 1)[0]
    return name if name.isidentifier() else None


# --- hooks for the replay paths ----------------------------------------------------

def check_replay(inst: Any, session: Any) -> None:
    """Before a replay outside the GPU patches (CPU stand-ins, graphed callables): record what changed
    since the capture that `inst` (its Instrumentation) instrumented."""
    guards: Optional[GuardSet] = getattr(inst, "guards", None)
    if guards is None or not guards.pending:
        return
    recorder = Recorder(region=inst.recorder.region, phase="replay")
    guards.check(recorder, frames.current_user_frame(2))
    if recorder.observations:
        session.recorders.append(recorder)
        session.changed()  # the supervising process keeps what is found before a crash


def graphed(fn: Any, inst: Any, session: Any) -> Any:
    """`fn` checking its capture's guards before each call, as a graphed callable replays."""
    def check() -> None:
        check_replay(inst, session)

    if isinstance(fn, torch.nn.Module):
        forward = fn.forward

        def guarded_forward(*args: Any, **kwargs: Any) -> Any:
            check()
            return forward(*args, **kwargs)

        fn.forward = guarded_forward
        return fn

    @functools.wraps(fn)
    def guarded(*args: Any, **kwargs: Any) -> Any:
        check()
        return fn(*args, **kwargs)

    return guarded
