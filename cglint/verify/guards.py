"""Replay guards: the Python values a capture read, checked before every replay.

TorchDynamo guards what a compiled frame read and recompiles when it changes; a CUDA graph
has no such check, so a temperature, `self.training`, a config field or a global changed
between replays is silently ignored by every replay. This module gives captures guards.

Collecting, during a capture only. `sys.settrace` is on for the capture window: a 'call'
event per new frame, 'line' events in user frames (which lines ran: reads in a branch not
taken are not guarded) and a 'return' event, where the frame's reads are evaluated on its
locals. Which reads a frame makes comes from its bytecode (`readplan`), once per code
object. Tracing was chosen over per-object read hooks (a class's `__getattribute__`
swapped, proxies): those change the objects user code sees, cannot see globals or closure
cells, and cost on every read; tracing costs only during the one capture and leaves
nothing behind. Frames already running when the capture starts (the `with` body at the
capture site) get a local tracer. Library frames are followed only for `forward` of
nn.Modules (a Dropout holds `self.training` and `self.p`), reported at the user line that
called them. A read is kept when its value is a Python scalar (number, bool, str, None,
enum, dtype, device, or a short tuple of those): those reach tensor work, a branch, a loop
bound, a slice or a shape; objects and tensors are not values a replay freezes.

Checking, before each replay. Attributes of nn.Modules are watched rather than re-read:
while the verifier runs it wraps `Module.__setattr__` and the `.data` setter of
parameters, and a write to a guarded (module, attribute) marks the guards that depend on
it, with the line that wrote it. The other guards (globals, closure cells, attributes of
plain objects, container items) are re-read: one `is` comparison each, `==` only when
the identity changed. A replay whose guarded state was not written costs a truthiness test
and the re-read guards, typically a handful. Writes that bypass `__setattr__`
(`vars(module)[k] = v`) are not seen on modules.

Parameters and buffers of the modules that ran are guarded by identity: rebinding one
(`.data =`, a new nn.Parameter, a buffer reassigned) is a CG401 finding at the rebinding
line; so is a buffer rebound inside the captured region itself.
"""
from __future__ import annotations

import enum
import functools
import gc
import operator
import sys
import threading
import weakref
from collections import deque
from dataclasses import dataclass
from types import CodeType, FrameType, ModuleType
from typing import Any, Callable, Iterable, Optional

import torch

from cglint.findings import Related
from cglint.verify import frames, monitor, readplan, torchmodes
from cglint.verify import rule_codes as rc
from cglint.verify.recorder import Recorder

_SCALAR_TYPES = frozenset({bool, int, float, complex, str, bytes, type(None), torch.dtype, torch.device})
_MAX_TUPLE = 16
_MISSING = object()
_CODES = {readplan.VALUE: rc.code_of("frozen-host-value"), readplan.BRANCH: rc.code_of("branch-on-changing-host-state"),
          readplan.SLICE: rc.code_of("size-from-changing-host-state")}
_CONTAINERS = (dict, list, tuple)
_SIZED = (dict, list, tuple, set, frozenset, deque, str, bytes)
_verdicts = frames.verdicts  # is_user_code's cache, read directly on the hot path


def guardable(value: Any) -> bool:
    kind = type(value)
    if kind in _SCALAR_TYPES or isinstance(value, enum.Enum):
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


@dataclass
class Guard:
    text: str  # `self.temperature`, `config.GUIDANCE`
    code: str
    where: frames.Where
    stack: Callable[[], tuple[str, ...]]  # the trace, resolved only when the guard reports (labels cost)
    captured: Any
    fetch: Callable[[], Any]  # the value now; raises when its object is gone
    writers: Callable[[], list[Related]] = lambda: []  # where a global is assigned (found statically)


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
        # one `is`); kept here because captures share their Guard objects (Collector._guard).
        self.last: dict[int, Any] = {}
        # Device tensors the capture site read by name (`static_x`, `self.static_x`): replays
        # check they are still the captured ones (liveness). Held until the capture ends.
        self.site_tensors: dict[str, torch.Tensor] = {}
        self._read: list[tuple[Guard, list[tuple[int, str]]]] = []
        self.ref = weakref.ref(self)  # what the watchers' tables hold (see _subscribe)

    def __len__(self) -> int:
        return len(self.polled) + sum(len(v) for v in self.by_key.values())

    @property
    def pending(self) -> bool:
        return bool(self.polled or self.dirty or self.events)

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
            if watched and _installed:
                for key in watched:
                    self.by_key.setdefault(key, []).append(guard)
                    _subscribe(_subscribers, key, self)
            else:
                self.polled.append(guard)
        self._read = []

    def bind(self, modules: Iterable[torch.nn.Module]) -> None:
        if not _installed:
            return  # rebinding is seen by the watchers only
        # Every parameter of every module that ran, at every capture (500 per capture of a decoder):
        # the loop stays plain.
        me, ref = id(self), self.ref
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
                    (_subscribers.get(key) or _subscribers.setdefault(key, {}))[me] = ref
                    (_data_subscribers.get(id(t)) or _data_subscribers.setdefault(id(t), {}))[me] = ref

    def parameters(self) -> list[tuple[str, "weakref.ref[torch.Tensor]", int]]:
        """(label, weak reference, data_ptr) of the parameters and buffers of the modules that ran."""
        found = []
        for bound in self.bound.values():
            owner = bound.module()
            found.append((f"`{bound.name}` of {type(owner).__name__}" if owner is not None else f"`{bound.name}`",
                          bound.tensor, bound.data_ptr))
        return found

    # --- what the watchers report ----------------------------------------------
    def written(self, key: tuple[int, str], value: Any, writer: Related) -> None:
        if key in self.by_key:
            self.dirty[key] = writer
        bound = self.bound.get(key)
        if bound is not None and value is not bound.tensor():
            owner = bound.module()
            what = f"`{bound.name}` of {type(owner).__name__}" if owner is not None else f"`{bound.name}`"
            self.events.append((_where(writer), (), f"{what} is rebound to another tensor after the capture at "
                                f"{self.label}; the graph keeps reading the captured one", bound.data_ptr))

    def data_written(self, t: torch.Tensor, writer: Related) -> None:
        bound = self.bound_tensors.get(id(t))
        if bound is None or bound.tensor() is not t or t.data_ptr() == bound.data_ptr:
            return
        owner = bound.module()
        what = f"`{bound.name}` of {type(owner).__name__}" if owner is not None else "a captured parameter"
        self.events.append((_where(writer), (), f"`.data` assignment moves {what} to new memory after the capture at "
                            f"{self.label}; the graph keeps reading the old memory", bound.data_ptr))

    # --- the check ---------------------------------------------------------------
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
                if not same(now, guard.captured):
                    self.changed[id(guard)] = (guard, now)
                    _report(guard, now, recorder, frame, guard.writers())
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
                    if not same(now, guard.captured):
                        self.changed[id(guard)] = (guard, now)
                        _report(guard, now, recorder, frame, [writer] if writer else [])
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
    if guard.code == _CODES[readplan.BRANCH]:
        effect = "the branch or loop here took its path at capture, and every replay repeats it"
    elif guard.code == _CODES[readplan.SLICE]:
        effect = "the slice here keeps the extent it had at capture"
    else:
        effect = f"the graph keeps using {then}"
    written = f" (set at {writers[0].path}:{writers[0].line})" if writers else ""
    what = f"`{guard.text}` was {then} at capture and is {_shown(now)} before this replay{written}; {effect}"
    obs = recorder.observe_at(guard.code, what, guard.where, guard.stack(), evidence=_replay_note(frame))
    if obs.what != what and not obs.what.startswith(f"`{guard.text}`"):
        obs.add(f"also {what.split(';')[0]}")  # another value read on the same line
    for related in writers[:3]:
        obs.relate(related)


# --- collecting during a capture --------------------------------------------------

class Collector:
    """Follows the frames of one capture and turns what they read into a GuardSet."""

    def __init__(self, recorder: Recorder):
        self.recorder = recorder
        region = recorder.region
        self.guards = GuardSet(f"{region.path}:{region.line}" if region else "the capture")
        self._lines: dict[FrameType, set[int]] = {}
        self._running: list[tuple[FrameType, Any]] = []  # frames live at start, with their own tracer
        self._previous: Optional[Callable] = None
        self._modules: dict[int, torch.nn.Module] = {}
        self._site_codes: list[CodeType] = []
        # Frames running when the capture started: (offset they were at, their enclosing loops'
        # variables). Their reads before that offset ran before the capture (the `with` line's
        # `graphs[bs]`, `pool`), and a capture loop's variable is the key of the graph it made:
        # replaying graphs[8] after the loop is not "`bs` was 8 and is now 1".
        self._started_at: dict[FrameType, tuple[int, frozenset[str]]] = {}
        self._stack: tuple[Optional[FrameType], tuple] = (None, ())
        self._importing = 0
        # Guards are shared between captures at one site only: their traces and writers name it.
        self._site_key = (region.path, region.line) if region else None

    def start(self) -> "Collector":
        self.thread = threading.get_ident()
        self._codes: set[CodeType] = set()  # codes given local events (sys.monitoring)
        self._library_codes: set[CodeType] = set()
        self._tool: Optional[int] = None
        if monitor.AVAILABLE and self._monitor_start():
            _collecting.append(self)
            return self
        self._previous = sys.gettrace()
        frame, stop = sys._getframe(1), self.recorder.stop
        while stop is not None and frame is not None:
            if frames.is_user_code(frame.f_code):
                self._lines[frame] = set()
                self._running.append((frame, frame.f_trace))
                self._site_codes.append(frame.f_code)
                self._started_at[frame] = (frame.f_lasti, readplan.loop_targets(frame.f_code, frame.f_lasti))
                frame.f_trace = _chained(self._local, frame.f_trace)
            if frame is stop:
                break
            frame = frame.f_back
        torchmodes.own_hooks.add(self._global)
        sys.settrace(self._global)
        _collecting.append(self)
        return self

    def stop(self) -> GuardSet:
        if self._tool is not None:
            e = monitor.events()
            monitor.release(self._tool, (e.PY_START, e.LINE, e.PY_RETURN, e.PY_YIELD, e.PY_UNWIND), self._codes)
            self._tool = None
        else:
            sys.settrace(self._previous)
            torchmodes.own_hooks.discard(self._global)
        if self in _collecting:
            _collecting.remove(self)
        for frame, previous in self._running:
            frame.f_trace = previous
        for frame in list(self._lines):  # the capture site and other frames still running
            self._leave(frame, library=False)
        self._lines.clear()
        self._running = []
        self._stack = (None, ())
        self.guards.freeze()
        self.guards.bind(self._modules.values())
        self._modules.clear()
        return self.guards

    # --- sys.monitoring (3.12+): lines and returns of user frames, returns of library forwards ----
    def _monitor_start(self) -> bool:
        e = monitor.events()
        self._tool = monitor.acquire("cglint replay guards", {
            e.PY_START: self._on_start, e.LINE: self._on_line, e.PY_RETURN: self._on_return,
            e.PY_YIELD: self._on_return, e.PY_UNWIND: self._on_return}, e.PY_START | e.PY_UNWIND)
        if self._tool is None:
            return False
        frame, stop = sys._getframe(2), self.recorder.stop
        while stop is not None and frame is not None:  # the capture site and the frames around it
            if frames.is_user_code(frame.f_code):
                self._lines[frame] = set()
                self._site_codes.append(frame.f_code)
                self._started_at[frame] = (frame.f_lasti, readplan.loop_targets(frame.f_code, frame.f_lasti))
                self._follow(frame.f_code)
            if frame is stop:
                break
            frame = frame.f_back
        return True

    def _follow(self, code: CodeType) -> None:
        if code not in self._codes:
            self._codes.add(code)
            e = monitor.events()
            sys.monitoring.set_local_events(self._tool, code, e.LINE | e.PY_RETURN | e.PY_YIELD)

    def _on_start(self, code: CodeType, offset: int) -> Any:
        user = _verdicts.get(code)
        if user is None:
            user = frames.is_user_code(code)
        if user:
            if not monitor.followed(code):
                return sys.monitoring.DISABLE
            if monitor.importing(sys._getframe(1)):
                return None  # module code run by an import is not the region's work; ask again after it
            self._follow(code)
        elif code.co_name == "forward" and code not in self._codes and _takes_self(code):
            self._library_codes.add(code)
            self._codes.add(code)
            e = monitor.events()
            sys.monitoring.set_local_events(self._tool, code, e.PY_RETURN | e.PY_YIELD)
        return sys.monitoring.DISABLE  # once per code object

    def _on_line(self, code: CodeType, line: int) -> Any:
        if line not in readplan.lines(code):
            return sys.monitoring.DISABLE  # nothing on this line is ever guarded: it need not be seen again
        if threading.get_ident() == self.thread:
            frame = sys._getframe(1)
            lines = self._lines.get(frame)
            if lines is None:
                lines = self._lines[frame] = set()
            lines.add(line)
        return None

    def _on_return(self, code: CodeType, offset: int, value: Any) -> Any:
        if threading.get_ident() != self.thread:
            return None
        frame = sys._getframe(1)
        if code in self._library_codes:
            self._leave(frame, library=True)
        elif frame in self._lines:
            self._leave(frame, library=False)
        return None

    # --- trace functions -------------------------------------------------------
    def _global(self, frame: FrameType, event: str, arg: Any) -> Any:
        # Called for every new frame of the capture: library frames leave at once.
        previous = self._previous(frame, event, arg) if self._previous is not None else None
        if self._importing:
            return previous
        code = frame.f_code
        user = _verdicts.get(code)
        if user is None:
            user = frames.is_user_code(code)
        if user:
            if code.co_name == "<module>" or code.co_filename.startswith("<"):
                return previous  # module code run by an import; code made by exec (dataclass __init__)
            self._lines[frame] = set()
            mine = self._local
        elif code.co_name == "forward" and _takes_self(code):
            if previous is None:
                frame.f_trace_lines = False
            mine = self._library
        elif code.co_name == "_find_and_load" and code.co_filename.startswith("<frozen importlib"):
            self._importing += 1  # a lazy import's module code is not the region's work
            return _chained(self._import_done, previous)
        else:
            return previous
        return mine if previous is None else _chained(mine, previous)

    def _local(self, frame: FrameType, event: str, arg: Any) -> Any:
        if event == "line":
            lines = self._lines.get(frame)
            if lines is not None:
                lines.add(frame.f_lineno)
        elif event == "return" and frame in self._lines:
            self._leave(frame, library=False)
        return self._local

    def _import_done(self, frame: FrameType, event: str, arg: Any) -> Any:
        if event == "return":
            self._importing -= 1
        return self._import_done

    def _library(self, frame: FrameType, event: str, arg: Any) -> Any:
        if event == "return":
            self._leave(frame, library=True)
        return self._library

    # --- evaluating a frame's reads --------------------------------------------
    def _leave(self, frame: FrameType, *, library: bool) -> None:
        lines = self._lines.pop(frame, None)
        code = frame.f_code
        try:
            if library:
                self._leave_library(frame, code)
                return
            local = frame.f_locals
            owner = local.get("self") if _takes_self(code) else None
            if isinstance(owner, torch.nn.Module):
                self._modules[id(owner)] = owner
            at_site = frame in self._started_at
            started, loop_keys = self._started_at.pop(frame, (-1, frozenset()))
            for site in readplan.plan(code):
                if lines is not None and site.line not in lines:
                    continue
                if site.offset < started or (site.root in loop_keys and not site.steps):
                    continue
                if at_site:
                    self._site_tensor(frame.f_globals if site.kind == "global" else local, site)
                self._guard(frame, local, site, frame)
        except Exception:  # noqa: BLE001 - a guard is never worth breaking the user's capture
            return

    def _leave_library(self, frame: FrameType, code: CodeType) -> None:
        """The `forward` of a library module (a Dropout's `self.training`, `self.p`): its plain attributes,
        reported at the user line that called it."""
        owner = frame.f_locals.get("self")
        if not isinstance(owner, torch.nn.Module):
            return
        self._modules[id(owner)] = owner
        reads = _library_reads(code)
        if not reads:
            return
        state = owner.__dict__  # parameters, buffers and submodules live elsewhere: never guarded here
        at: Optional[FrameType] = None
        for site, name in reads:
            value = state.get(name, _MISSING)
            if value is _MISSING or not guardable(value) or self.guards.seen((("object", id(owner)), site.steps)):
                continue
            at = at or frames.user_frame(frame.f_back)
            if at is None:
                return
            where = frames.where(at)
            code_ = _CODES[readplan.BRANCH if name == "training" else site.use]
            guard = Guard(f"{type(owner).__name__}.{name}", code_, where, self._trace(at, where), value,
                          _fetcher(weakref.ref(owner), site.steps))
            self.guards.add(guard, [(id(owner), name)])

    def _site_tensor(self, space: Any, site: readplan.ReadSite) -> None:
        """Keep a device tensor the capture site reads by name: `static_x`, `self.static_x`."""
        if site.kind == "deref" or any(step != "attr" for step, _ in site.steps) or site.text in self.guards.site_tensors:
            return
        value = space.get(site.root, _MISSING)
        for _, key in site.steps:
            value = _MISSING if isinstance(value, torch.Tensor) else getattr(value, key, _MISSING)
        if isinstance(value, torch.Tensor) and value.is_cuda:
            self.guards.site_tensors[site.text] = value

    def _guard(self, frame: FrameType, local: Any, site: readplan.ReadSite, at: FrameType) -> None:
        rooted = _root(frame, local, site)
        if rooted is None:
            return
        value, identity, get_root = rooted
        if self.guards.seen((identity, site.steps)):
            return  # read before (each layer's forward reads the same config): nothing new to build
        root = value
        watched: list[tuple[int, str]] = []
        watchable = site.kind in ("local", "deref")
        holder = None
        for step, key in site.steps:
            if isinstance(value, torch.Tensor):
                return
            holder = value
            if step == "attr":
                if isinstance(value, torch.nn.Module):
                    watched.append((id(value), key))
                    value = _module_attr(value, key)
                    if value is _MISSING:
                        return  # a parameter or buffer: tensors are not guarded
                else:
                    watchable = False
                    value = getattr(value, key)
            elif step == "item":
                if type(value) not in _CONTAINERS:
                    return
                value, watchable = value[key], False
            else:
                if not isinstance(value, _SIZED):
                    return
                value, watchable = len(value), False
        if not guardable(value):
            return
        # A serving engine captures the same step at many batch sizes: each capture reads the same
        # values at the same sites, and building their guards again was most of the collector's
        # cost. A guard an earlier capture at this site built from this object is shared while it
        # still reads this value.
        reuse = (identity, id(site), self._site_key)
        built = _built.get(reuse)
        if built is not None and built[0] is site and _still(built[1], value):
            self.guards.add(built[1], built[2])
            return
        if get_root is None:
            try:
                get_root = weakref.ref(root)
            except TypeError:
                get_root = functools.partial(_same_object, root)
        where = _site_where(frame.f_code, site)
        training = site.steps[-1:] == (("attr", "training"),) if site.steps else False
        code = _CODES[readplan.BRANCH if training else site.use]
        guard = Guard(site.text, code, where, self._trace(at, where), value, _fetcher(get_root, site.steps),
                      _writers_of(frame, site, holder, self._site_codes, self.recorder))
        watched = watched if watchable else []
        self.guards.add(guard, watched)
        if len(_built) > _MAX_BUILT:
            _built.clear()
        _built[reuse] = (site, guard, watched)

    def _trace(self, at: FrameType, read: frames.Where) -> Callable[[], tuple[str, ...]]:
        """How to label the stack from the capture site to the read, should the guard ever report.
        Only positions are taken now: labels read source lines and resolve paths, and most guards never fire."""
        if self._stack[0] is not at:  # the guards of one frame share its stack
            self._stack = (at, frames.stack_positions(at, self.recorder.stop))
        stack = self._stack[1]
        recorder = self.recorder

        def labels() -> tuple[str, ...]:
            shown = [w.label() for w in frames.resolve(stack)]
            if shown:
                shown[-1] = read.label()
            site = recorder.site_label()
            if site and tuple(shown[:1]) == site:
                shown = shown[1:]
            return site + tuple(shown)

        return labels


_built: dict[tuple, tuple[readplan.ReadSite, Guard, list[tuple[int, str]]]] = {}
_MAX_BUILT = 100_000


def _still(guard: Guard, value: Any) -> bool:
    """Whether a guard built by an earlier capture reads `value` now and read it then."""
    try:
        return same(guard.captured, value) and same(guard.fetch(), value)
    except Exception:  # noqa: BLE001 - its object is gone
        return False


def _takes_self(code: CodeType) -> bool:
    """Whether `code` is a method's, its first argument `self`. Cached: co_varnames builds a new
    tuple on every access (3.11+), and every frame of the capture asks."""
    found = _methods.get(code)
    if found is None:
        found = _methods[code] = code.co_varnames[:1] == ("self",)
    return found


_methods: dict[CodeType, bool] = {}


def _chained(mine: Callable, theirs: Optional[Callable]) -> Callable:
    """A local trace function that also runs the one a debugger or coverage installed."""
    if theirs is None:
        return mine
    state = [theirs]

    def local(frame: FrameType, event: str, arg: Any) -> Any:
        if state[0] is not None:
            state[0] = state[0](frame, event, arg)
        mine(frame, event, arg)
        return local

    return local


def _root(frame: FrameType, local: Any, site: readplan.ReadSite) -> Optional[tuple[Any, tuple, Optional[Callable[[], Any]]]]:
    """(the root's value now, its identity, how to get it again later: None for an object, held by a
    weak reference once a guard needs it), or None when not guardable."""
    if site.kind in ("global", "name"):
        space = frame.f_globals
        if site.kind == "name" and local is not space and site.root in local:
            return None  # a class body's own names
        if site.root not in space:
            return None  # a builtin
        value = space[site.root]
        if isinstance(value, ModuleType) and not _user_module(value):
            return None  # torch.float16, math.pi: library constants
        return value, ("global", id(space), site.root), functools.partial(operator.getitem, space, site.root)
    value = local.get(site.root, _MISSING)
    if value is _MISSING or isinstance(value, torch.Tensor):
        return None
    if site.kind == "deref" and not site.steps:
        if not guardable(value):
            return None
        cell = _cell(frame.f_code, site.root, value)
        if cell is None:
            return None
        return value, ("cell", id(cell)), functools.partial(getattr, cell, "cell_contents")
    if type(value) in (dict, list, set):
        return None  # a container passed in: holding it would keep its tensors alive
    return value, ("object", id(value)), None


def _site_where(code: CodeType, site: readplan.ReadSite) -> frames.Where:
    # By identity: a site belongs to one code object's plan, and hashing the dataclass cost more
    # than the Where.
    found = _wheres.get(id(site))
    if found is None or found[0] is not site:
        found = _wheres[id(site)] = (site, frames.Where(code.co_filename, site.line, site.column, site.end_line,
                                                        site.end_column, code.co_name))
    return found[1]


_wheres: dict[int, tuple[readplan.ReadSite, frames.Where]] = {}


def _module_attr(module: torch.nn.Module, name: str) -> Any:
    """`getattr(module, name)` without Module.__getattr__'s Python call for parameters and buffers
    (read on every layer of a model): _MISSING for those, which are tensors."""
    value = module.__dict__.get(name, _MISSING)
    if value is not _MISSING:
        return value
    value = module.__dict__.get("_modules", {}).get(name, _MISSING)
    if value is not _MISSING:
        return value
    if name in module.__dict__.get("_parameters", ()) or name in module.__dict__.get("_buffers", ()):
        return _MISSING
    return getattr(module, name)


_library_plans: dict[CodeType, tuple[tuple[readplan.ReadSite, str], ...]] = {}


def _library_reads(code: CodeType) -> tuple[tuple[readplan.ReadSite, str], ...]:
    """The `self.NAME` reads of a library forward, once per code object."""
    found = _library_plans.get(code)
    if found is None:
        found = _library_plans[code] = tuple(
            (site, site.steps[0][1]) for site in readplan.plan(code)
            if site.kind == "local" and site.root == "self" and len(site.steps) == 1 and site.steps[0][0] == "attr")
    return found


def _same_object(value: Any) -> Any:
    return value


def _user_module(module: ModuleType) -> bool:
    path = getattr(module, "__file__", None)
    return bool(path) and frames._is_user_path(path)


def _cell(code: CodeType, name: str, value: Any) -> Any:
    """The closure cell a frame of `code` read `name` from (the function object is not on the frame)."""
    index = code.co_freevars.index(name)
    for fn in gc.get_referrers(code):
        closure = getattr(fn, "__closure__", None)
        if getattr(fn, "__code__", None) is code and closure:
            try:
                if closure[index].cell_contents is value:
                    return closure[index]
            except ValueError:
                continue
    return None


_chains: dict[tuple, Callable[[Any], Any]] = {}


def _fetcher(get_root: Callable[[], Any], steps: tuple) -> Callable[[], Any]:
    if not steps:
        return get_root
    if all(step == "attr" for step, _ in steps):
        chain = _chains.get(steps)
        if chain is None:
            chain = _chains[steps] = operator.attrgetter(".".join(key for _, key in steps))
        return lambda: chain(get_root())

    def fetch() -> Any:
        value = get_root()
        for step, key in steps:
            value = getattr(value, key) if step == "attr" else value[key] if step == "item" else len(value)
        return value

    return fetch


def _writers_of(frame: FrameType, site: readplan.ReadSite, holder: Any, site_codes: list[CodeType],
                recorder: Recorder) -> Callable[[], list[Related]]:
    """Where a module-level name is assigned: `global NAME` in a function, or the capturing script's own code."""
    if site.kind in ("global", "name") and not site.steps:
        space, name = frame.f_globals, site.root
    elif site.steps and site.steps[-1][0] == "attr" and isinstance(holder, ModuleType):
        space, name = vars(holder), site.steps[-1][1]
    else:
        return lambda: []
    after = recorder.region.line if recorder.region else 0
    own = [c for c in site_codes if c.co_name == "<module>"]
    return lambda: _assignments(space, name, own, after)


def _assignments(space: dict, name: str, module_codes: list[CodeType], after: int) -> list[Related]:
    found: list[Related] = []
    codes: list[CodeType] = []
    for value in list(space.values()):
        fn = getattr(value, "__func__", value)
        if getattr(fn, "__globals__", None) is space:
            codes.append(fn.__code__)
        elif isinstance(value, type) and value.__module__ == space.get("__name__"):
            codes += [getattr(m, "__func__", m).__code__ for m in vars(value).values()
                      if hasattr(getattr(m, "__func__", m), "__code__")]
    for code in codes:
        found += _stores(code, name, "STORE_GLOBAL", 0)
    for code in module_codes:
        found += _stores(code, name, "STORE_NAME", after)
    return found


def _stores(code: CodeType, name: str, opname: str, after: int) -> list[Related]:
    import dis

    out = []
    for ins in dis.get_instructions(code):
        line = ins.positions.lineno if ins.positions else None
        if ins.opname == opname and ins.argval == name and line and line > after:
            out.append(Related(frames.display_path(code.co_filename), line, (ins.positions.col_offset or 0) + 1,
                               f"`{name}` is assigned here"))
    for const in code.co_consts:
        if isinstance(const, CodeType):
            out += _stores(const, name, "STORE_GLOBAL", 0)
    return out


# --- watchers: installed for a whole verify session --------------------------------

_installed = False
_collecting: list[Collector] = []
_subscribers: dict[Any, dict[int, "weakref.ref[GuardSet]"]] = {}
_data_subscribers: dict[int, dict[int, "weakref.ref[GuardSet]"]] = {}
_saved: list[tuple[type, str, Any]] = []
_ABSENT = object()
_TENSOR_DATA = torch._C.TensorBase.__dict__["data"]


def _subscribe(table: dict, key: Any, guards: GuardSet) -> None:
    # A dict of weak references, not a WeakSet: every capture subscribes each parameter of the
    # modules that ran, and WeakSet.add was a tenth of a decoder capture's instrumentation.
    subs = table.get(key)
    if subs is None:
        subs = table[key] = {}
    subs[id(guards)] = guards.ref


def _live(subs: dict[int, "weakref.ref[GuardSet]"]) -> list[GuardSet]:
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
        if _collecting and isinstance(value, torch.Tensor):
            _rebound_in_capture(self, name, value)
        original(self, name, value)
        if _subscribers:
            key = (id(self), name)
            subs = _subscribers.get(key)
            if subs:
                writer = _writer()
                for guards in _live(subs):
                    guards.written(key, value, writer)

    return __setattr__


def _rebound_in_capture(module: torch.nn.Module, name: str, value: torch.Tensor) -> None:
    stores = [module.__dict__.get("_buffers") or {}, module.__dict__.get("_parameters") or {}]
    old = next((s[name] for s in stores if name in s), None)
    if old is None or old is value:
        return
    collector = _collecting[-1]
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


def install() -> None:
    """Watch writes to modules and parameters for the rest of the session."""
    global _installed
    if _installed:
        return
    module_cls, param_cls = torch.nn.Module, torch.nn.Parameter
    _saved.append((module_cls, "__setattr__", module_cls.__dict__.get("__setattr__", _ABSENT)))
    module_cls.__setattr__ = functools.wraps(module_cls.__setattr__)(_module_setattr(module_cls.__setattr__))
    _saved.append((param_cls, "data", param_cls.__dict__.get("data", _ABSENT)))
    param_cls.data = property(_data_get, _data_set, doc=_TENSOR_DATA.__doc__)
    _installed = True


def uninstall() -> None:
    global _installed
    while _saved:
        owner, name, original = _saved.pop()
        if original is _ABSENT:
            delattr(owner, name)
        else:
            setattr(owner, name, original)
    _subscribers.clear()
    _data_subscribers.clear()
    _installed = False


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

