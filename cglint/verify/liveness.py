"""Are the tensors a graph reads still the ones it captured? Checked before each replay.

A graph reads and writes fixed addresses. At capture end the verifier keeps a weak
reference to every device tensor the capture read but did not make (static inputs,
parameters) and to the outputs, with the names they had in the capturing frame. Before a
replay, a dead reference means the memory was freed (the allocator may reuse it); a name
that now holds another tensor means the user rebound it instead of copying into it. When
that other tensor is a later graph's output stored by the same assignment (graphs captured
in a loop, every output bound to one name), the finding is CG958 at that assignment.
"""
from __future__ import annotations

import dis
import weakref
from dataclasses import dataclass
from functools import lru_cache
from types import FrameType
from typing import Any, Optional

import torch

from cglint.verify import frames
from cglint.verify import rule_codes as rc
from cglint.verify.recorder import Recorder
from cglint.verify.rule_metadata import message
from cglint.verify.torchmodes import OpMode


@dataclass
class Read:
    ref: "weakref.ref[torch.Tensor]"
    data_ptr: int
    names: tuple[str, ...]
    seen_at: str  # "model.py:12 (aten.addmm)"
    output: bool = False
    stored_at: Optional[frames.Where] = None  # an output: the assignment in the capturing frame

    @property
    def label(self) -> str:
        return f"`{self.names[0]}`" if self.names else f"the tensor read at {self.seen_at}"


def names_of(t: torch.Tensor, frame: Optional[FrameType]) -> tuple[str, ...]:
    """The names `t` has in `frame`: locals, attributes of `self`, else globals."""
    if frame is None:
        return ()
    local = frame.f_locals
    names = [n for n, v in local.items() if v is t]
    owner = local.get("self")
    if hasattr(owner, "__dict__"):
        names += [f"self.{n}" for n, v in vars(owner).items() if v is t]
    if not names:
        names = [n for n, v in frame.f_globals.items() if v is t]
    return tuple(names)


def lookup(name: str, frame: Optional[FrameType]) -> Any:
    if frame is None:
        return None
    if name.startswith("self."):
        return getattr(frame.f_locals.get("self"), name[5:], None)
    if name in frame.f_locals:
        return frame.f_locals[name]
    return frame.f_globals.get(name)


def snapshot(ops: OpMode, frame: Optional[FrameType]) -> list[Read]:
    reads = []
    for ext in ops.external.values():
        t = ext.ref()
        if t is None:
            continue
        path = frames.display_path(ext.code.co_filename) if ext.code else "?"
        reads.append(Read(ext.ref, ext.data_ptr, names_of(t, frame), f"{path}:{ext.line} (aten.{ext.op})"))
    if frame is not None:
        made = {id(ref()) for ref in ops._made.values() if ref() is not None}
        owner = frame.f_locals.get("self")
        bound = [(n, v) for n, v in list(frame.f_locals.items())]
        if hasattr(owner, "__dict__"):
            bound += [(f"self.{n}", v) for n, v in list(vars(owner).items())]  # a runner's `self.static_out`
        for name, value in bound:
            if isinstance(value, torch.Tensor) and id(value) in made and value.device.type == "cuda":
                stored_at = _store(frame, name)
                reads.append(Read(weakref.ref(value), value.data_ptr(), (name,), "capture output", output=True,
                                  stored_at=stored_at))
                if stored_at is not None:
                    _OUTPUT_STORES[id(value)] = (weakref.ref(value, lambda _r, key=id(value): _OUTPUT_STORES.pop(key, None)),
                                                 stored_at)
    return reads


# Every live captured output that was bound to a name, with the assignment that bound it; by
# id, as a WeakKeyDictionary would compare two tensors with `==`.
_OUTPUT_STORES: dict[int, tuple["weakref.ref[torch.Tensor]", frames.Where]] = {}
_STORES = {"STORE_FAST", "STORE_NAME", "STORE_GLOBAL", "STORE_DEREF"}


@lru_cache(maxsize=None)
def _stores(code) -> tuple[tuple[str, int, int], ...]:
    """(name, line, offset) of every store to a name or to an attribute of `self` in `code`."""
    found, previous = [], None
    for ins in dis.get_instructions(code):
        if ins.opname in _STORES:
            found.append((ins.argval, ins.positions.lineno or 0, ins.offset))
        elif ins.opname == "STORE_ATTR" and previous is not None and previous.argval == "self":
            found.append((f"self.{ins.argval}", ins.positions.lineno or 0, ins.offset))
        if ins.opname != "CACHE":
            previous = ins
    return tuple(found)


def _store(frame: FrameType, name: str) -> Optional[frames.Where]:
    """The last assignment to `name` before the point `frame` is at: the capture body's."""
    before = [(line, offset) for stored, line, offset in _stores(frame.f_code) if stored == name and offset < frame.f_lasti]
    if not before:
        return None
    line, offset = max(before, key=lambda s: s[1])
    return frames.position(frame.f_code, line, offset)


def check(reads: list[Read], recorder: Recorder, frame: Optional[FrameType], graph_label: str,
          explained: frozenset[int] | set[int] = frozenset()) -> None:
    """Record what changed since capture; `frame` is the user frame calling replay().

    explained: data_ptrs of tensors whose rebinding the replay guards reported at its line."""
    for read in reads:
        if read.data_ptr in explained:
            continue
        t = read.ref()
        rebound = None
        for name in read.names:
            if _other_tensor(lookup(name, frame), t):
                rebound = name
                break
        if rebound is not None and _same_assignment(read, lookup(rebound, frame)):
            recorder.observe_at(rc.CAPTURE_LOOP_OUTPUT_REBOUND,
                                f"`{rebound}` was bound here to the output of the graph captured at {graph_label} and "
                                f"then to a later graph's output; that replay wrote to a tensor `{rebound}` no longer "
                                f"holds, so reading `{rebound}` after it gives another graph's values",
                                read.stored_at, evidence="seen at replay")
        elif rebound is not None:
            kind = "output" if read.output else "input"
            recorder.observe(rc.REBIND_CAPTURED_TENSOR, f"captured {kind} `{rebound}` was rebound before replay; the graph "
                             f"still uses the tensor captured at {graph_label}", frame)
        elif t is None and not read.output:
            recorder.observe(rc.DELETE_CAPTURED_TENSOR if read.names else rc.CAPTURED_TENSOR_GONE,
                             _gone(read, graph_label), frame)
        elif t is not None and t.data_ptr() != read.data_ptr:
            recorder.observe(rc.RESIZE_IN_CAPTURE, f"{read.label} moved to new memory (resize_ or set_) after capture at "
                             f"{graph_label}", frame)


class Watch:
    """The reads of one graph, checked before each of its replays at a cost that leaves replays alone.

    Named reads (static inputs and outputs, a handful) are checked on every replay: a rebound
    name is only seen by looking. The unnamed ones (every parameter and buffer of a model,
    hundreds) are watched: a weak reference's callback says when one is freed, and a few of
    them, in turn, are checked for having moved (resize_, set_), so a moved tensor is found
    within len(unnamed) / SAMPLE replays instead of costing every replay a pass over all of them.
    """

    SAMPLE = 8

    def __init__(self, reads: list[Read]):
        self.named = [r for r in reads if r.names]
        self.unnamed = [r for r in reads if not r.names]
        self.freed = False
        self._cursor = 0
        self._explained: set[int] = set()  # rebinding the replay guards reported: not a move, ever
        self._keep = [weakref.ref(t, self._on_free) for t in (r.ref() for r in self.unnamed) if t is not None]

    def _on_free(self, _ref: Any) -> None:
        self.freed = True

    def __bool__(self) -> bool:
        return bool(self.named or self.unnamed)

    def check(self, recorder: Recorder, frame: Optional[FrameType], graph_label: str,
              explained: frozenset[int] | set[int] = frozenset()) -> None:
        if self.freed:
            self.freed = False
            reads = self.named + self.unnamed
        else:
            start = self._cursor
            reads = self.named + self.unnamed[start:start + self.SAMPLE]
            self._cursor = start + self.SAMPLE if start + self.SAMPLE < len(self.unnamed) else 0
        self._explained |= explained
        before = len(recorder.observations)
        check(reads, recorder, frame, graph_label, self._explained)
        if len(recorder.observations) != before:  # report each loss once
            self.named = [r for r in self.named if r.ref() is not None]
            self.unnamed = [r for r in self.unnamed if r.ref() is not None]


def _same_assignment(read: Read, now: Any) -> bool:
    """Is the name's new tensor another graph's output, bound by the assignment that bound this one?"""
    if not read.output or read.stored_at is None or not isinstance(now, torch.Tensor):
        return False
    ref, stored_at = _OUTPUT_STORES.get(id(now), (None, None))
    return ref is not None and ref() is now and stored_at == read.stored_at


def _other_tensor(value: Any, captured: Optional[torch.Tensor]) -> bool:
    return isinstance(value, torch.Tensor) and value is not captured


def _gone(read: Read, graph_label: str) -> str:
    if read.names:
        return f"captured tensor {read.label} was freed before replay of the graph captured at {graph_label}"
    return message(rc.CAPTURED_TENSOR_GONE, f"{read.label} was freed or rebound after capture at {graph_label}")
