"""Are the tensors a graph reads still the ones it captured? Checked before each replay.

A graph reads and writes fixed addresses. At capture end the verifier keeps a weak
reference to the device tensors the capture site read by name (static inputs), to the
parameters and buffers of the modules that ran, and to the outputs: the device tensors the
capture body bound to names. (A dispatch mode would see every tensor an operator reads, at
several times the cost of a bare capture; the names and modules cover what replays rebind.)
Before a replay, a dead reference means the memory was freed (the allocator may reuse it); a name
that now holds another tensor means the user rebound it instead of copying into it. When
that other tensor is a later graph's output stored by the same assignment (graphs captured
in a loop, every output bound to one name), the finding is CG958 at that assignment.
"""
from __future__ import annotations

import weakref
from dataclasses import dataclass
from types import FrameType
from typing import Any, Iterable, Optional

import torch

from cglint.verify.findings import frames
from cglint.verify.guards import bytecode
from cglint.verify.compiled.kept_outputs import tensors
from cglint.verify.findings import rule_codes as rc
from cglint.verify.findings.recorder import Recorder
from cglint.verify.findings.rule_metadata import message


@dataclass
class Read:
    ref: "weakref.ref[torch.Tensor]"
    data_ptr: int
    names: tuple[str, ...]
    seen_at: str  # "capture input", "capture output", "`weight` of Linear"
    output: bool = False
    stored_at: Optional[frames.Where] = None  # an output: the assignment in the capturing frame

    @property
    def label(self) -> str:
        return f"`{self.names[0]}`" if self.names else self.seen_at


def lookup(name: str, frame: Optional[FrameType]) -> Any:
    if frame is None:
        return None
    if name.startswith("self."):
        return getattr(frame.f_locals.get("self"), name[5:], None)
    if name in frame.f_locals:
        return frame.f_locals[name]
    return frame.f_globals.get(name)


# Every live captured output that was bound to a name, with the assignments that bound it; by
# id, as a WeakKeyDictionary would compare two tensors with `==`.
_OUTPUT_STORES: dict[int, tuple["weakref.ref[torch.Tensor]", frozenset[frames.Where]]] = {}


def snapshot(site_tensors: dict[str, torch.Tensor], parameters: Iterable[tuple[str, Any, int]],
             frame: Optional[FrameType], started: int) -> list[Read]:
    """What replays of a graph captured in `frame` must find unchanged.

    site_tensors: the device tensors the capture site read by name (the guard collector saw
    the reads); parameters: (label, weak reference, data_ptr) of the parameters and buffers of
    the modules that ran; started: the offset `frame` was at when the capture began. A name
    the capture body assigned a device tensor to is an output."""
    reads = []
    outputs: dict[str, torch.Tensor] = {}
    last: dict[str, tuple[int, int]] = {}  # name -> (line, offset) of its last assignment in the body
    if frame is not None:
        for stored, line, offset in bytecode.stores(frame.f_code):  # in code order: the last one wins
            if started < offset < frame.f_lasti:
                last[stored] = (line, offset)
    for name, (line, offset) in last.items():
        value = lookup(name, frame)
        if not isinstance(value, torch.Tensor):
            # `self.static_outputs = decode(...)`, a tuple: its tensors are outputs too, watched
            # for being kept across replays (not by name: the tuple is what the name holds).
            reads += [Read(weakref.ref(t), t.data_ptr(), (), f"capture output in `{name}`", output=True)
                      for t in tensors(value) if t.is_cuda]
            continue
        if not value.is_cuda:
            continue
        outputs[name] = value
        stored_at = frames.position(frame.f_code, line, offset)  # type: ignore[union-attr]
        reads.append(Read(weakref.ref(value), value.data_ptr(), (name,), "capture output", output=True,
                          stored_at=stored_at))
        key = id(value)  # one tensor may have two names (`logits = out.float()` is `out`)
        ref, stores = _OUTPUT_STORES.get(key, (None, frozenset()))
        if ref is None or ref() is not value:
            # (mypy cannot infer a lambda with a default argument)
            ref, stores = weakref.ref(value, lambda _r, key=key: _OUTPUT_STORES.pop(key, None)), frozenset()  # type: ignore[misc]
        _OUTPUT_STORES[key] = (ref, stores | {stored_at})
    made = {id(t) for t in outputs.values()}
    for name, value in site_tensors.items():
        if id(value) not in made:  # `self.static_out.float()` in the body reads an output
            reads.append(Read(weakref.ref(value), value.data_ptr(), (name,), "capture input"))
    for label, ref, data_ptr in parameters:
        reads.append(Read(ref, data_ptr, (), label))
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
        if rebound is not None and read.stored_at is not None and _same_assignment(read, lookup(rebound, frame)):
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

    def outputs(self) -> list[torch.Tensor]:
        """The graph's static outputs that are still alive."""
        return [t for t in (r.ref() for r in self.named + self.unnamed if r.output) if t is not None]

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
    ref, stores = _OUTPUT_STORES.get(id(now), (None, frozenset()))
    return ref is not None and ref() is now and read.stored_at in stores


def _other_tensor(value: Any, captured: Optional[torch.Tensor]) -> bool:
    return isinstance(value, torch.Tensor) and value is not captured


def _gone(read: Read, graph_label: str) -> str:
    if read.names:
        return f"captured tensor {read.label} was freed before replay of the graph captured at {graph_label}"
    return message(rc.CAPTURED_TENSOR_GONE, f"{read.label} was freed or rebound after capture at {graph_label}")
