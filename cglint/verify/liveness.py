"""Are the tensors a graph reads still the ones it captured? Checked before each replay.

A graph reads and writes fixed addresses. At capture end the verifier keeps a weak
reference to every device tensor the capture read but did not make (static inputs,
parameters) and to the outputs, with the names they had in the capturing frame. Before a
replay, a dead reference means the memory was freed (the allocator may reuse it); a name
that now holds another tensor means the user rebound it instead of copying into it.
"""
from __future__ import annotations

import weakref
from dataclasses import dataclass
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
        for name, value in list(frame.f_locals.items()):
            if isinstance(value, torch.Tensor) and id(value) in made and value.device.type == "cuda":
                reads.append(Read(weakref.ref(value), value.data_ptr(), (name,), "capture output", output=True))
    return reads


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
        if rebound is not None:
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


def _other_tensor(value: Any, captured: Optional[torch.Tensor]) -> bool:
    return isinstance(value, torch.Tensor) and value is not captured


def _gone(read: Read, graph_label: str) -> str:
    if read.names:
        return f"captured tensor {read.label} was freed before replay of the graph captured at {graph_label}"
    return message(rc.CAPTURED_TENSOR_GONE, f"{read.label} was freed or rebound after capture at {graph_label}")
