"""Outputs of earlier calls of a function compiled with CUDA graphs, still held by the user (CG956).

CUDA-graph trees hand every replay's outputs back in the same memory. `KeptOutputs` looks, right
after each compiled call, for tensors the user's frames still hold that this call's outputs
overwrote, and reports where the code reads them or stores them (regions.py installs it).
"""
from __future__ import annotations

import functools
import sys
import weakref
from types import CodeType, FrameType
from typing import TYPE_CHECKING, Any, Iterator, Optional

from cglint import vocabulary
from cglint.verify.findings import frames
from cglint.verify.guards import bytecode
from cglint.verify.findings.rule_codes import code_of

if TYPE_CHECKING:
    from cglint.verify.compiled.regions import CompileEventCollector

OUTPUT_KEPT = code_of("compiled-output-kept-across-calls")
STATIC_OUTPUT_KEPT = code_of("static-output-kept-across-replays")
OVERWRITTEN = "overwritten by a subsequent run"  # torch's words for an output a later run replaced


class KeptOutputs:
    """Outputs of earlier compiled calls that a later call overwrote, still held by the user.

    CUDA-graph trees return each replay's outputs in the same memory, and on the replay fast
    path as the same tensor object (torch caches it), so an overwritten output cannot be told
    from the new one by identity or by a read. What can be told is the holding: right after a
    call returns, before its result is bound, every tensor the user's frames hold whose memory
    overlaps this call's outputs came from an earlier call (an input or parameter it aliases is
    excluded). Held under another name that is read later, or in a container or an attribute,
    it is an output kept past the next call (CG956), reported where the code reads the name or
    stores into the container. torch's own invalidation (a recording in a new generation
    releases the old outputs; reading one raises) is detected the same way: the kept tensor's
    storage refuses access with torch's "overwritten by a subsequent run" message.
    """

    CONTAINER_TAIL = 64  # the newest items of a long container: kept outputs are the recent ones

    def __init__(self, collector: "CompileEventCollector"):
        self.collector = collector
        self._earlier: dict[int, tuple[Any, tuple[int, int]]] = {}  # id -> (weakref, memory range)

    def returned(self, output: Any, inputs: Any) -> None:
        import torch

        outs = [t for t in tensors(output) if _on_gpu(t) and not isinstance(t, torch.nn.Parameter)]
        given = [r for r in map(_memory, tensors(inputs)) if r is not None]
        ranges = [r for r in map(_memory, outs) if r is not None and not any(_overlap(r, g) for g in given)]
        if not ranges:
            return
        earlier = [(ref(), old) for ref, old in self._earlier.values()]
        reused = any(t is not None and (any(_overlap(r, old) for r in ranges) or _released(t)) for t, old in earlier)
        for t in outs:
            memory = _memory(t)
            if memory is not None:
                self._earlier[id(t)] = (weakref.ref(t, functools.partial(self._forget, id(t))), memory)
        if reused:
            self._look_for_holders(ranges)

    def _forget(self, key: int, ref: Any) -> None:
        entry = self._earlier.get(key)
        if entry is not None and entry[0] is ref:
            del self._earlier[key]

    def _look_for_holders(self, ranges: list[tuple[int, int]]) -> None:
        frame = frames.current_user_frame(1)
        while frame is not None:
            if frames.is_user_code(frame.f_code):
                self._frame_holders(frame, ranges)
            frame = frame.f_back

    def _frame_holders(self, frame: FrameType, ranges: list[tuple[int, int]]) -> None:
        code, offset = frame.f_code, frame.f_lasti  # the CALL of the compiled function (or of its caller)
        targets = _store_targets(code, offset)
        for name, value in list(frame.f_locals.items()):
            if _is_stale(value, ranges) and name not in targets:
                line = _next_read(code, offset, name)
                if line is not None:
                    self._report(frame, line, f"`{name}`")
            elif _holds_stale(value, ranges, self.CONTAINER_TAIL):
                self._report(frame, _store_line(code, name, None) or frame.f_lineno, f"the container `{name}`")
            elif _user_object(value):
                for attr, held in list(vars(value).items()):
                    if f"{name}.{attr}" in targets:
                        continue
                    if _is_stale(held, ranges) or _holds_stale(held, ranges, self.CONTAINER_TAIL):
                        self._report(frame, _store_line(code, name, attr) or frame.f_lineno, f"`{name}.{attr}`")

    def _report(self, frame: FrameType, line: int, holder: str) -> None:
        call = frames.where(frame)
        self.collector.observe(
            OUTPUT_KEPT,
            f"{holder} holds an output of an earlier call of a function compiled with CUDA graphs; the call at "
            f"{frames.display_path(call.path)}:{call.line} returned its outputs in the same CUDA-graph memory, so it now "
            "reads that call's values",
            frames.Where(frame.f_code.co_filename, line), "seen when a later call overwrote it")


def static_outputs_kept(recorder: Any, frame: Optional[FrameType], outputs: list, graph_label: str) -> None:
    """Before a replay of a captured graph: a container in the replaying frames (a local, or an
    attribute of the user's object) that holds one of the graph's static outputs, or a view of
    it, twice or more. Each replay writes the outputs in place, so what was appended after one
    replay is overwritten by the next (`latents.append(self.z_next)` in the loop that replays).
    Holding it once may be the runner's own bookkeeping (`self.outputs = [y]`); twice is an
    output kept across replays (CG955), reported where the code stores into the container. So
    is once, in a list of a caller's frame (`new_tokens.append(next_token)` in a draft loop that
    calls the runner k times): the replay about to run overwrites what it holds."""
    ranges = [r for r in map(_memory, outputs) if r is not None]
    replaying = frame
    while ranges and frame is not None:
        if frames.is_user_code(frame.f_code):
            for name, value in list(frame.f_locals.items()):
                held = [(None, value)] + (list(vars(value).items()) if _user_object(value) else [])
                for attr, item in held:
                    gathered = frame is not replaying and attr is None and _holds_once(item, ranges)
                    if gathered or _holds_twice(item, ranges):
                        holder = f"`{name}.{attr}`" if attr else f"`{name}`"
                        line = _store_line(frame.f_code, name, attr) or frame.f_lineno
                        recorder.observe_at(
                            STATIC_OUTPUT_KEPT,
                            f"{holder} holds the static output of the graph captured at {graph_label} from more than one "
                            "replay; every replay writes its outputs into the same memory, so all of them hold the newest "
                            "values (keep `.clone()`s)",
                            frames.Where(frame.f_code.co_filename, line), evidence="seen at replay")
        frame = frame.f_back


# An output kept on every replay is among the newest items after the second replay: looking
# at a few keeps this check, which runs before every replay, from costing the replay loop.
_NEWEST = 4


def _holds_once(value: Any, ranges: list[tuple[int, int]]) -> bool:
    """A list or deque (gathered across calls) with an item in the graph's output memory."""
    from collections import deque

    return isinstance(value, (list, deque)) and _holds_stale(value, ranges, _NEWEST)


def _holds_twice(value: Any, ranges: list[tuple[int, int]]) -> bool:
    if isinstance(value, tuple):
        return False  # built once: it cannot gather an output from several replays
    items = _newest_items(value, _NEWEST)
    return any(sum(_is_stale(item, [r]) for item in items) >= 2 for r in ranges)


# --- helpers: tensors and memory -----------------------------------------------------------

def tensors(value: Any, depth: int = 0) -> Iterator[Any]:
    import torch

    if isinstance(value, torch.Tensor):
        yield value
    elif depth < 3 and isinstance(value, (list, tuple)):
        for item in value:
            yield from tensors(item, depth + 1)
    elif depth < 3 and isinstance(value, dict):
        for item in value.values():
            yield from tensors(item, depth + 1)


def _on_gpu(t: Any) -> bool:
    """Only device tensors live in a CUDA-graph pool."""
    return t.is_cuda


def _memory(t: Any) -> Optional[tuple[int, int]]:
    """The byte range of a tensor's storage; None when it has none or torch released it."""
    try:
        storage = t.untyped_storage()
        start = storage.data_ptr()
        return (start, start + storage.nbytes()) if start else None
    except Exception:  # noqa: BLE001 - a released output raises on access
        return None


def _released(t: Any) -> bool:
    """torch invalidated this output (a newer recording reused its memory): any access raises."""
    try:
        t.untyped_storage().data_ptr()
    except RuntimeError as exc:
        return OVERWRITTEN in str(exc)
    except Exception:  # noqa: BLE001
        return False
    return False


def _user_object(value: Any) -> bool:
    """An instance of a class the user wrote (`self` of a trainer): its attributes are looked at too."""
    if isinstance(value, type) or not hasattr(value, "__dict__"):
        return False
    return frames.is_user_module(sys.modules.get(getattr(type(value), "__module__", "")))


def _overlap(a: tuple[int, int], b: tuple[int, int]) -> bool:
    return a[0] < b[1] and b[0] < a[1]


def _is_stale(value: Any, ranges: list[tuple[int, int]]) -> bool:
    import torch

    if not isinstance(value, torch.Tensor) or isinstance(value, torch.nn.Parameter) or not _on_gpu(value):
        return False
    memory = _memory(value)
    return _released(value) if memory is None else any(_overlap(memory, r) for r in ranges)


def _holds_stale(value: Any, ranges: list[tuple[int, int]], tail: int) -> bool:
    return any(_is_stale(item, ranges) for item in _newest_items(value, tail))


def _newest_items(value: Any, tail: int) -> list:
    """The last `tail` items of a list, tuple or deque, or values of a dict; nothing for anything else."""
    from collections import deque
    from itertools import islice

    if isinstance(value, (list, tuple)):
        return list(value[-tail:])
    if isinstance(value, deque):
        return list(islice(reversed(value), tail))
    if isinstance(value, dict):
        return list(islice(reversed(value.values()), tail))
    return []


# --- helpers: the caller's bytecode -----------------------------------------------------------

_STORE_METHODS = vocabulary.runtime_names("memory.stores", "methods") | vocabulary.runtime_names("memory.stores", "dict_methods")


def _store_targets(code: CodeType, offset: int) -> set[str]:
    """Where the value of the call running at `offset` goes: `out`, `a, b`, `self.last`."""
    ins = bytecode.instructions(code)
    after = [i for i in ins if i[0] > offset]
    targets: set[str] = set()
    expect = 1
    for position, (_, op, arg, _line) in enumerate(after[:12]):
        if op in ("CACHE", "EXTENDED_ARG", "COPY", "NOP"):
            continue
        if op.startswith("UNPACK_SEQUENCE"):
            expect = arg if isinstance(arg, int) else expect
            continue
        if op in bytecode.STORES:
            targets.add(arg)
        elif op == "STORE_ATTR" and position and after[position - 1][1] in bytecode.LOADS:
            targets.add(f"{bytecode.names(after[position - 1][2])[-1]}.{arg}")
        elif op not in bytecode.LOADS:
            break
        else:
            continue
        expect -= 1
        if expect <= 0:
            break
    return targets


def _next_read(code: CodeType, offset: int, name: str) -> Optional[int]:
    """The line of the next read of `name` after `offset`, or of one before it when a loop goes back."""
    ins = bytecode.instructions(code)
    reads = [(o, line) for o, op, arg, line in ins if op in bytecode.LOADS and name in bytecode.names(arg)]
    later = [line for o, line in reads if o > offset]
    if later:
        return later[0]
    loops_back = any(op.startswith("JUMP_BACKWARD") or (op == "JUMP_ABSOLUTE" and isinstance(arg, int) and arg <= offset)
                     for o, op, arg, _ in ins if o > offset)
    return reads[0][1] if reads and loops_back else None


def _store_line(code: CodeType, name: str, attr: Optional[str]) -> Optional[int]:
    """The line that puts something into `name` (or `name.attr`): `.append(...)`, `[k] = ...`, `.attr = ...`."""
    ins = bytecode.instructions(code)
    for k, (_, op, arg, line) in enumerate(ins):
        if op not in bytecode.LOADS or name not in bytecode.names(arg):
            continue
        rest = ins[k + 1:k + 3]
        if attr is not None:
            if rest and rest[0][1] == "STORE_ATTR" and rest[0][2] == attr:
                return line
            if not rest or rest[0][1] not in ("LOAD_ATTR", "LOAD_METHOD") or rest[0][2] != attr:
                continue
            rest = ins[k + 2:k + 4]
        if rest and rest[0][1] in ("LOAD_ATTR", "LOAD_METHOD") and rest[0][2] in _STORE_METHODS:
            return rest[0][3]
    return None
