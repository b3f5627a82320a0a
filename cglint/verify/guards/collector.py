"""Collecting replay guards during a capture: which Python values the captured code read.

`sys.settrace` (sys.monitoring on 3.12+) is on for the capture window: a 'call' event per new  # type: ignore[attr-defined]  # 3.12+, used when sysmon.AVAILABLE
frame, 'line' events in user frames (which lines ran: reads in a branch not taken are not
guarded) and a 'return' event, where the frame's reads are evaluated on its locals. Which
reads a frame makes comes from its bytecode (`readplan`), once per code object. Tracing was
chosen over per-object read hooks (a class's `__getattribute__` swapped, proxies): those
change the objects user code sees, cannot see globals or closure cells, and cost on every
read; tracing costs only during the one capture and leaves nothing behind. Frames already
running when the capture starts (the `with` body at the capture site) get a local tracer.
Library frames are followed only for `forward` of nn.Modules (a Dropout holds
`self.training` and `self.p`), reported at the user line that called them. A read is kept
when its value is a Python scalar (guards.guardable) or a functools.partial; a tensor read from
a dict, a list or a plain object's attribute is kept as a slot (guards.Slot). Counters the captured
code advances (`self.pos += 1`, readplan.counters) are read when their line starts and again at the
end of the capture: one that moved advanced once, at capture, and never on replay (CG505).
"""
from __future__ import annotations

import dataclasses
import functools
import gc
import itertools
import operator
import sys
import threading
import weakref
from collections import deque
from types import CodeType, FrameType, ModuleType
from typing import Any, Callable, Iterable, Optional, cast

import torch

from cglint.findings import Related
from cglint.verify.capture import sysmon, torchmodes
from cglint.verify.findings import frames
from cglint.verify.guards import readplan, watchers, writers
from cglint.verify.findings import rule_codes as rc
from cglint.verify.guards.guardset import CODES, Guard, GuardSet, PartialCall, Slot, frozen, guardable, same
from cglint.verify.findings.recorder import Recorder

_verdicts = frames.verdicts  # is_user_code's cache, read directly on the hot path
_MISSING = object()
_CONTAINERS = (dict, list, tuple)
_SIZED = (dict, list, tuple, set, frozenset, deque, str, bytes)
_LOOPED: tuple[type, ...] = (list, tuple, dict, type({}.items()), type({}.values()), type({}.keys()))  # read again without running code
_HELD = (dict, list, set)  # roots held strongly (no weak references to them): for slots only
_NUMBERS = frozenset({int, float, complex, bool})

class GuardReadCollector:
    """Collects the reads of one capture's frames that become its replay guards (a GuardSet)."""

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
        # Counters: (root identity, steps) -> (site, value before the line ran, fetch, where, trace, root id).
        self._counted: dict[tuple, tuple] = {}
        self._stored: set[tuple] = set()  # (root identity, steps) of chains captured code stored to
        self._born: set[int] = set()  # objects whose __init__ ran in the capture: their counters start there

    def start(self) -> "GuardReadCollector":
        self.thread = threading.get_ident()
        self._codes: set[CodeType] = set()  # codes given local events (sys.monitoring)
        self._library_codes: set[CodeType] = set()
        self._tool: Optional[int] = None
        if sysmon.AVAILABLE and self._monitor_start():
            watchers.collecting.append(self)
            return self
        self._previous = sys.gettrace()
        frame: Optional[FrameType]
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
        watchers.collecting.append(self)
        return self

    def stop(self) -> GuardSet:
        if self._tool is not None:
            e = sysmon.events()
            sysmon.release(self._tool, (e.PY_START, e.LINE, e.PY_RETURN, e.PY_YIELD, e.PY_UNWIND), self._codes)
            self._tool = None
        else:
            sys.settrace(self._previous)
            torchmodes.own_hooks.discard(self._global)
        if self in watchers.collecting:
            watchers.collecting.remove(self)
        for frame, previous in self._running:
            frame.f_trace = previous
        for frame in list(self._lines):  # the capture site and other frames still running
            self._leave(frame, library=False)
        self._lines.clear()
        self._report_counters()
        self._stored.clear()
        self._running = []
        self._stack = (None, ())
        self.guards.freeze()
        self.guards.bind(self._modules.values())
        self._modules.clear()
        return self.guards

    # --- sys.monitoring (3.12+): lines and returns of user frames, returns of library forwards ----
    def _monitor_start(self) -> bool:
        e = sysmon.events()
        self._tool = sysmon.acquire("cglint replay guards", {
            e.PY_START: self._on_start, e.LINE: self._on_line, e.PY_RETURN: self._on_return,
            e.PY_YIELD: self._on_return, e.PY_UNWIND: self._on_return}, e.PY_START | e.PY_UNWIND)
        if self._tool is None:
            return False
        frame: Optional[FrameType]
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
            e = sysmon.events()
            sys.monitoring.set_local_events(self._tool, code, e.LINE | e.PY_RETURN | e.PY_YIELD)  # type: ignore[attr-defined]  # 3.12+, used when sysmon.AVAILABLE

    def _on_start(self, code: CodeType, offset: int) -> Any:
        user = _verdicts.get(code)
        if user is None:
            user = frames.is_user_code(code)
        if user:
            if not sysmon.followed(code):
                if code.co_name == "__init__" and threading.get_ident() == self.thread:  # a dataclass's (exec)
                    self._born.add(id(sys._getframe(1).f_locals.get("self")))
                    return None  # every call: each makes a new object
                return sys.monitoring.DISABLE  # type: ignore[attr-defined]  # 3.12+, used when sysmon.AVAILABLE
            if sysmon.importing(sys._getframe(1)):
                return None  # module code run by an import is not the region's work; ask again after it
            self._follow(code)
        elif code.co_name == "forward" and code not in self._codes and _takes_self(code):
            self._library_codes.add(code)
            self._codes.add(code)
            e = sysmon.events()
            sys.monitoring.set_local_events(self._tool, code, e.PY_RETURN | e.PY_YIELD)  # type: ignore[attr-defined]  # 3.12+, used when sysmon.AVAILABLE
        return sys.monitoring.DISABLE  # type: ignore[attr-defined]  # once per code object

    def _on_line(self, code: CodeType, line: int) -> Any:
        if line not in readplan.lines(code):
            return sys.monitoring.DISABLE  # type: ignore[attr-defined]  # nothing on this line is ever guarded: it need not be seen again
        if threading.get_ident() == self.thread:
            frame = sys._getframe(1)
            lines = self._lines.get(frame)
            if lines is None:
                lines = self._lines[frame] = set()
            lines.add(line)
            counters = readplan.counter_lines(code).get(line)
            if counters:
                self._count(frame, counters)
            stores = readplan.store_lines(code).get(line)
            if stores:
                self._store(frame, stores)
            indexed = readplan.var_lines(code).get(line)
            if indexed:
                self._indexed(frame, indexed)
        return None

    def _on_return(self, code: CodeType, offset: int, value: Any) -> Any:
        if threading.get_ident() != self.thread:
            return None
        frame = sys._getframe(1)
        if code in self._library_codes:
            self._leave(frame, library=True)
        elif frame in self._lines:
            self._leave(frame, library=False)
        elif code.co_name == "__init__":
            self._born.add(id(frame.f_locals.get("self")))
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
                if code.co_name == "__init__":  # a dataclass's: its object is new
                    self._born.add(id(frame.f_locals.get("self")))
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
                counters = readplan.counter_lines(frame.f_code).get(frame.f_lineno)
                if counters:
                    self._count(frame, counters)
                stores = readplan.store_lines(frame.f_code).get(frame.f_lineno)
                if stores:
                    self._store(frame, stores)
                indexed = readplan.var_lines(frame.f_code).get(frame.f_lineno)
                if indexed:
                    self._indexed(frame, indexed)
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
            if code.co_name == "__init__":
                self._born.add(id(owner))
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
                    self._site_container(frame, frame.f_globals if site.kind == "global" else local, site)
                if site.kind == "local" and site.root not in local and site.root in readplan.loop_sources(code):
                    for element in _loop_values(frame, local, readplan.loop_sources(code)[site.root]):
                        self._guard(frame, {**local, site.root: element}, site, frame)  # 3.12 cleared it
                    continue
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
            code_ = CODES[readplan.BRANCH if name == "training" else site.use]
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

    def _site_container(self, frame: FrameType, space: Any, site: readplan.ReadSite) -> None:
        """Static inputs held in a container the capture site passes (`self._forward(**self.static_kwargs)`,
        a batch dataclass): each of its entries that holds tensors is a slot, so that an entry rebound
        instead of copied into (`static_kwargs["cond"] = new_cond`) is reported where it is rebound. Tensor
        entries count when the container is unpacked into the call (`*`, `**`): those are its arguments."""
        if site.kind not in ("local", "global", "name") or any(step != "attr" for step, _ in site.steps):
            return
        value = space.get(site.root, _MISSING)
        for _, key in site.steps:
            if value is _MISSING or isinstance(value, (torch.Tensor, ModuleType)):
                return
            value = _module_attr(value, key) if isinstance(value, torch.nn.Module) else getattr(value, key, _MISSING)
        if type(value) not in _CONTAINERS and not _is_dataclass_object(value):
            return
        unpacked = readplan.unpacked(frame.f_code, site)
        get_root = functools.partial(_space_get, space, site.root) if site.kind != "local" or not site.steps \
            else _weak_or_held(space.get(site.root))
        self._entries(frame, site, value, _fetcher(get_root, site.steps), site.text, unpacked, 0)

    def _entries(self, frame: FrameType, site: readplan.ReadSite, container: Any, get: Callable[[], Any], text: str,
                 tensors: bool, depth: int) -> None:
        if depth > 2 or self.guards.seen(("entries", id(container))):
            return
        if type(container) in (dict,):
            items, step = list(container.items())[:64], "item"
        elif type(container) in (list, tuple):
            items, step = list(enumerate(container))[:64], "item"
        elif _is_dataclass_object(container):
            items, step = [(f.name, getattr(container, f.name, None)) for f in dataclasses.fields(container)], "attr"
        else:
            return
        for key, entry in items:
            if not isinstance(key, (str, int)):
                continue
            label = f"{text}.{key}" if step == "attr" else f"{text}[{key!r}]"
            fetch = _fetcher(get, ((step, key),))
            nested = type(entry) in _CONTAINERS or _is_dataclass_object(entry)
            if nested and not _holds_tensors(entry, 2):
                continue
            if type(container) is not tuple and (nested or (tensors and isinstance(entry, torch.Tensor))):
                try:
                    data_ptr = entry.data_ptr() if isinstance(entry, torch.Tensor) else 0
                except Exception:  # noqa: BLE001 - no storage
                    continue
                self.guards.slot(Slot(label, _site_where(frame.f_code, site), _weak_or_held(entry), data_ptr, fetch,
                                      get, (step, key), container=nested))
            if nested:
                self._entries(frame, site, entry, fetch, label, True, depth + 1)

    def _guard(self, frame: FrameType, local: Any, site: readplan.ReadSite, at: FrameType) -> None:
        rooted = _root(frame, local, site)
        if rooted is None:
            return
        value, identity, get_root = rooted
        if self.guards.seen((identity, site.steps, site.test)):
            return  # read before (each layer's forward reads the same config): nothing new to build
        root = value
        watched: list[tuple[int, str]] = []
        watchable = site.kind in ("local", "deref")
        holder = None
        for index, (step, key) in enumerate(site.steps):
            if isinstance(value, torch.Tensor):
                if index and not isinstance(holder, (torch.nn.Module, tuple)):
                    self._slot(frame, site, index, root, identity, get_root, value)
                return
            holder = value
            if step == "attr":
                if isinstance(value, torch.nn.Module):
                    if key in value.__dict__ or key in value.__dict__.get("_modules", ()):
                        watched.append((id(value), key))
                    else:  # a class attribute: `Loss.temperature = t` bypasses the instance's __setattr__
                        watchable = False
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
        if isinstance(value, torch.Tensor) and site.steps and not isinstance(holder, (torch.nn.Module, tuple)):
            self._slot(frame, site, len(site.steps), root, identity, get_root, value)
            return
        value = frozen(value)
        if not guardable(value) or (site.kind in ("local", "deref") and type(root) in _HELD
                                    and not _passed_in(frame.f_code, site)):
            return  # a container this call made is no state a replay freezes: held for its tensors only (slots)
        # A serving engine captures the same step at many batch sizes: each capture reads the same
        # values at the same sites, and building their guards again was most of the collector's
        # cost. A guard an earlier capture at this site built from this object is shared while it
        # still reads this value.
        reuse = (identity, id(site), self._site_key)
        built = _built.get(reuse)
        if built is not None and built[0] is site and _still(built[1], value):
            self.guards.add(built[1], built[2])
            return
        get_root = get_root or _weak(root)
        where = _site_where(frame.f_code, site)
        training = site.steps[-1:] == (("attr", "training"),) if site.steps else False
        code = CODES[readplan.BRANCH if training else site.use]
        fetch = _fetcher(get_root, site.steps)
        if type(value) is PartialCall:
            fetch = _frozen_fetch(fetch)
        found: Callable[[], list[Related]]
        if site.kind == "deref" and not site.steps and isinstance(get_root, functools.partial):
            found = functools.partial(writers.cell_stores, get_root.args[0], site.root)  # get_root reads the cell
        else:
            found = _writers_of(frame, site, holder, self._site_codes, self.recorder)
        guard = Guard(site.text, code, where, self._trace(at, where), value, fetch, found, test=site.test)
        if site.steps and site.steps[-1][0] in ("attr", "item") and not isinstance(holder, (ModuleType, torch.nn.Module)):
            guard.holder, guard.step = _fetcher(get_root, site.steps[:-1]), site.steps[-1]
        watched = watched if watchable else []
        self.guards.add(guard, watched)
        if len(_built) > _MAX_BUILT:
            _built.clear()
        _built[reuse] = (site, guard, watched)

    def _slot(self, frame: FrameType, site: readplan.ReadSite, index: int, root: Any, identity: tuple,
              get_root: Optional[Callable[[], Any]], tensor: torch.Tensor) -> None:
        """A tensor read from a dict, a list or a plain object (`inputs["x"]`, `batch.x`): rebinding it
        between replays leaves the graph reading the captured one."""
        steps = site.steps[:index]
        if steps[-1][0] not in ("attr", "item") or (identity, steps) in self._stored \
                or self.guards.seen(("slot", identity, steps)):
            return  # a chain the capture stored itself holds its own work (`self.out = model(x)`)
        try:
            data_ptr = tensor.data_ptr()
        except Exception:  # noqa: BLE001 - a tensor without storage
            return
        get_root = get_root or _weak(root)
        text = readplan.ReadSite(site.kind, site.root, steps, site.use, 0, 0, 0, 0, 0).text
        self.guards.slot(Slot(text, _site_where(frame.f_code, site), weakref.ref(tensor), data_ptr,
                              _fetcher(get_root, steps), _fetcher(get_root, steps[:-1]), steps[-1]))

    def _indexed(self, frame: FrameType, sites: tuple[readplan.ReadSite, ...]) -> None:
        """Before a line that reads `CHAIN[key]` with the key in a local (`self.scalings[slot]` in a loop over
        the slots): the read of each key the line sees, as if the key were written out."""
        if frame in self._started_at:
            return  # the capture site's own lookups (`graphs[bs]`): which graph, not what it computes
        try:
            local = frame.f_locals
            for site in sites:
                key = local.get(site.steps[-1][1], _MISSING)
                if type(key) not in (int, str):
                    continue
                concrete = _keyed.get((site, key))
                if concrete is None:
                    if len(_keyed) > _MAX_BUILT:
                        _keyed.clear()
                    concrete = _keyed[(site, key)] = dataclasses.replace(site, steps=site.steps[:-1] + (("item", key),))
                self._guard(frame, local, concrete, frame)
        except Exception:  # noqa: BLE001 - never worth breaking the user's capture
            return

    def _store(self, frame: FrameType, stores: tuple[readplan.ReadSite, ...]) -> None:
        """Before a line that stores to chains runs: they hold what the capture made from here on."""
        try:
            local = frame.f_locals
            for site in stores:
                rooted = _root(frame, local, site)
                if rooted is not None:
                    self._stored.add((rooted[1], site.steps))
        except Exception:  # noqa: BLE001 - never worth breaking the user's capture
            return

    # --- counters ------------------------------------------------------------------
    def _count(self, frame: FrameType, counters: tuple[readplan.ReadSite, ...]) -> None:
        """Before a line that advances counters runs: their values, the first time they are seen."""
        if frame in self._started_at:
            return  # the capture block's own bookkeeping (`self.captures += 1`) runs once on purpose
        try:
            local = frame.f_locals
            code = frame.f_code
            for site in counters:
                if site.kind == "local" and site.root not in code.co_varnames[:code.co_argcount + code.co_kwonlyargcount]:
                    continue  # an object this call made or looked up (`stats = {}`): not known to outlive it
                rooted = _root(frame, local, site)
                if rooted is None:
                    continue
                root, identity, get_root = rooted
                key = (identity, site.steps)
                if key in self._counted:
                    continue
                fetch = _fetcher(get_root or _weak(root), site.steps)
                value = fetch()
                if type(value) not in _NUMBERS:
                    continue  # a device tensor counter is updated in place, and captured
                where = _site_where(frame.f_code, site)
                self._counted[key] = (site, value, fetch, where, self._trace(frame, where), id(root))
        except Exception:  # noqa: BLE001 - never worth breaking the user's capture
            return

    def _report_counters(self) -> None:
        counted, self._counted = self._counted, {}
        for site, before, fetch, where, trace, root_id in counted.values():
            if root_id in self._born:
                continue  # an object built during the capture: its counter started there
            try:
                after = fetch()
            except Exception:  # noqa: BLE001 - gone
                continue
            if same(after, before):
                continue  # saved and restored, or not advanced
            self.recorder.observe_at(
                rc.HOST_COUNTER_IN_CAPTURE,
                f"`{site.text}` is advanced by captured code: {before!r} before the capture, {after!r} after it; "
                f"the line runs once, at capture, and replays never run it again, so `{site.text}` stops "
                "advancing while replays go on", where, trace())
        self._born.clear()

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
_keyed: dict[tuple, readplan.ReadSite] = {}  # a read by a local key, with the key seen written out
# The size at which either memo is cleared whole: an entry per read site and object read, far
# more than captures at a few sites build, so it only stops growth over a long session.
_MAX_BUILT = 100_000


def _is_dataclass_object(value: Any) -> bool:
    return dataclasses.is_dataclass(value) and not isinstance(value, type)


def _holds_tensors(value: Any, depth: int) -> bool:
    if isinstance(value, torch.Tensor):
        return True
    if depth < 0:
        return False
    if type(value) is dict:
        entries = list(value.values())[:64]
    elif type(value) in (list, tuple):
        entries = list(value)[:64]
    elif _is_dataclass_object(value):
        entries = [getattr(value, f.name, None) for f in dataclasses.fields(value)]
    else:
        return False
    return any(_holds_tensors(v, depth - 1) for v in entries)


def _space_get(space: Any, name: str) -> Any:
    return space[name]


def _weak_or_held(value: Any) -> Callable[[], Any]:
    """A weak reference where the object takes one (a tensor, a dataclass), else the object itself."""
    try:
        return weakref.ref(value)
    except TypeError:
        return functools.partial(_same_object, value)


def _passed_in(code: CodeType, site: readplan.ReadSite) -> bool:
    """Whether a container root reached the frame from outside: an argument (`group` of an optimizer's
    `_apply(params, group)`), a closure cell, or one looked up in such state (`for group in
    self.param_groups:`); one the call built itself is not state between replays."""
    if site.kind == "deref":
        return True
    return site.root in code.co_varnames[:code.co_argcount + code.co_kwonlyargcount] or site.root in readplan.borrowed_locals(code)

# Guards shared between captures hold their first capture's recorder and the objects they
# watch: they end with the session whose watchers they rely on (pytest runs many).
watchers.at_uninstall(_built.clear)


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


# How many values of a loop a comprehension ran over are guarded, read again from its iterable.
_MAX_LOOP_VALUES = 64


def _loop_values(frame: FrameType, local: Any, source: readplan.LoopSource) -> list:
    """The values a loop variable took, read again from the loop's iterable (`self.cfg.items()`,
    the second of each pair): 3.12 clears a comprehension's variables before the frame returns."""
    try:
        value: Any = frame.f_globals[source.root] if source.kind == "global" else local[source.root]
        for _, name in source.steps:
            value = getattr(value, name)
        if source.view:
            value = getattr(value, source.view)()
        if not isinstance(value, _LOOPED):
            return []  # a generator or a lazy sequence: reading it again could run code or consume it
        items: list[Any] = list(itertools.islice(cast(Iterable[Any], value), _MAX_LOOP_VALUES))
        return [item[source.place] for item in items] if source.place is not None else items
    except Exception:  # noqa: BLE001 - never worth breaking the user's capture
        return []


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
        if isinstance(value, ModuleType) and not frames.is_user_module(value):
            return None  # torch.float16, math.pi: library constants
        return value, ("global", id(space), site.root), functools.partial(operator.getitem, space, site.root)
    value = local.get(site.root, _MISSING)
    if value is _MISSING or isinstance(value, torch.Tensor):
        return None
    if site.kind == "super":
        cls = local.get("__class__")
        if not isinstance(cls, type) or not isinstance(value, cls):
            return None
        return super(cls, value), ("super", id(cls), id(value)), functools.partial(_super, cls, weakref.ref(value))
    if site.kind == "deref" and not site.steps:
        if not guardable(value):
            return None
        cell = _cell(frame.f_code, site.root, value)
        if cell is None:
            return None
        return value, ("cell", id(cell)), functools.partial(getattr, cell, "cell_contents")
    if type(value) in _HELD:  # a container passed in: held for its tensors only (slots), which live anyway
        return value, ("object", id(value)), functools.partial(_same_object, value)
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


def _weak(root: Any) -> Callable[[], Any]:
    try:
        return weakref.ref(root)
    except TypeError:
        return functools.partial(_same_object, root)


def _super(cls: type, ref: "weakref.ref[Any]") -> Any:
    obj = ref()
    if obj is None:
        raise LookupError("gone")
    return super(cls, obj)


def _frozen_fetch(fetch: Callable[[], Any]) -> Callable[[], Any]:
    return lambda: frozen(fetch())




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
        positions = getattr(ins, "positions", None)  # Python 3.11+
        line = positions.lineno if positions else None
        if ins.opname == opname and ins.argval == name and positions and line and line > after:
            out.append(Related(frames.display_path(code.co_filename), line, (positions.col_offset or 0) + 1,
                               f"`{name}` is assigned here"))
    for const in code.co_consts:
        if isinstance(const, CodeType):
            out += _stores(const, name, "STORE_GLOBAL", 0)
    return out
