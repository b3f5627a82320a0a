"""What a code object reads from long-lived Python state, found in its bytecode.

A read is a chain rooted at a local (`self`, an argument), a global or a closure cell,
followed by attribute loads and constant subscripts: `self.temperature`, `self.cfg["scale"]`,
`config.GUIDANCE`, `len(self.buffer)`. The bytecode also says what consumes the value: a
conditional jump (a branch), `GET_ITER` (a loop bound), `BUILD_SLICE` (a slice), or
anything else (an operand of tensor work). That is followed with a small stack model over
the instructions after the chain; an instruction it does not model ends the walk and the
read counts as a plain value.

Plans are computed once per code object and cached; they are pure data (no values), so
the guard collector only evaluates them on the frames a capture ran.
"""
from __future__ import annotations

import dis
import functools
import sys
from dataclasses import dataclass
from types import CodeType
from typing import Any, Optional

from cglint.verify import bytecode

VALUE, BRANCH, SLICE = "value", "branch", "slice"
_PY312 = sys.version_info >= (3, 12)
# (pops, pushes) of the instructions the use walk understands; others end it.
_STACK = {
    "LOAD_FAST": (0, 1), "LOAD_FAST_CHECK": (0, 1), "LOAD_FAST_BORROW": (0, 1), "LOAD_CONST": (0, 1),
    "LOAD_SMALL_INT": (0, 1), "LOAD_DEREF": (0, 1), "LOAD_NAME": (0, 1), "PUSH_NULL": (0, 1),
    "BINARY_OP": (2, 1), "COMPARE_OP": (2, 1), "IS_OP": (2, 1), "CONTAINS_OP": (2, 1), "BINARY_SUBSCR": (2, 1),
    "UNARY_NEGATIVE": (1, 1), "UNARY_NOT": (1, 1), "UNARY_INVERT": (1, 1), "UNARY_POSITIVE": (1, 1),
    "TO_BOOL": (1, 1), "PRECALL": (0, 0), "KW_NAMES": (0, 0), "NOP": (0, 0), "RESUME": (0, 0), "CACHE": (0, 0),
}


@dataclass(frozen=True)
class ReadSite:
    kind: str  # "local", "global", "name" (module-level code) or "deref" (a free variable)
    root: str
    steps: tuple[tuple[str, Any], ...]  # ("attr", name) | ("item", constant) | ("len", None)
    use: str  # VALUE, BRANCH or SLICE
    line: int
    column: int
    end_line: int
    end_column: int
    offset: int

    # Cached on the site (plans live as long as their code): every capture builds guards from the
    # same sites of each layer's forward.
    @functools.cached_property
    def text(self) -> str:
        out = self.root
        for step, key in self.steps:
            if step == "attr":
                out += f".{key}"
            elif step == "item":
                out += f"[{key!r}]"
            else:
                out = f"len({out})"
        return out


_plans: dict[CodeType, tuple[ReadSite, ...]] = {}


def plan(code: CodeType) -> tuple[ReadSite, ...]:
    found = _plans.get(code)
    if found is None:
        try:
            found = tuple(_scan(code))
        except Exception:  # noqa: BLE001 - bytecode this scanner does not know: no guards, never a crash
            found = ()
        _plans[code] = found
    return found


_lines: dict[CodeType, frozenset[int]] = {}


def lines(code: CodeType) -> frozenset[int]:
    """The lines of `code` that hold a read."""
    found = _lines.get(code)
    if found is None:
        found = _lines[code] = frozenset(site.line for site in plan(code))
    return found


def loop_targets(code: CodeType, offset: int) -> frozenset[str]:
    """The variables of the `for` loops of `code` that enclose `offset`."""
    try:
        insts = bytecode.instructions(code)
    except Exception:  # noqa: BLE001 - bytecode this scanner does not know
        return frozenset()
    names: set[str] = set()
    for k, (start, op, end, _line) in enumerate(insts):
        if op != "FOR_ITER" or not start < offset < end:
            continue
        for _, target, name, _ in insts[k + 1:k + 8]:  # `bs` or `bs, graph` (UNPACK_SEQUENCE, then a store each)
            if target in bytecode.STORES:
                names.add(name)
            elif target != "UNPACK_SEQUENCE":
                break
    return frozenset(names)


def _root(ins: dis.Instruction, code: CodeType) -> Optional[tuple[str, str]]:
    op, val = ins.opname, ins.argval
    if op.startswith("LOAD_FAST"):
        name = val[-1] if isinstance(val, tuple) else val
        return ("local", name) if isinstance(name, str) else None
    if op == "LOAD_GLOBAL":
        return "global", val
    if op == "LOAD_NAME":
        return "name", val
    if op in ("LOAD_DEREF", "LOAD_CLASSDEREF") and val in code.co_freevars:
        return "deref", val
    return None


def _attr(ins: dis.Instruction) -> Optional[str]:
    """The attribute a plain (non-method) attribute load reads."""
    if ins.opname != "LOAD_ATTR":
        return None
    if _PY312 and (ins.arg or 0) & 1:
        return None  # a method load (`obj.meth(...)`)
    return ins.argval


def _scan(code: CodeType):
    insts = [i for i in dis.get_instructions(code) if i.opname != "CACHE"]
    i, n = 0, len(insts)
    while i < n:
        root = _root(insts[i], code)
        if root is None:
            i += 1
            continue
        start, j, steps = insts[i], i + 1, []
        while j < n:
            name = _attr(insts[j])
            if name is not None:
                steps.append(("attr", name))
                j += 1
            elif insts[j].opname == "LOAD_CONST" and j + 1 < n and insts[j + 1].opname == "BINARY_SUBSCR" \
                    and isinstance(insts[j].argval, (str, int)):
                steps.append(("item", insts[j].argval))
                j += 2
            else:
                break
        last = insts[j - 1]
        j, steps = _len_call(insts, i, j, steps)
        if root[0] == "local" and not steps:
            i = j
            continue
        pos, end = start.positions, last.positions
        if pos is None or pos.lineno is None:
            i = j
            continue
        end_line = (end.end_lineno if end else None) or pos.lineno
        end_col = (end.end_col_offset if end else None) or pos.col_offset or 0
        yield ReadSite(root[0], root[1], tuple(steps), _use(insts, j), pos.lineno, (pos.col_offset or 0) + 1,
                       end_line, end_col + 1, start.offset)
        i = j


def _len_call(insts: list, i: int, j: int, steps: list) -> tuple[int, list]:
    """`len(chain)`: the builtin loaded just before the chain and called on it alone."""
    before = insts[i - 1] if i else None
    if before is None or before.opname not in ("LOAD_GLOBAL", "LOAD_NAME") or before.argval != "len":
        return j, steps
    k = j
    if k < len(insts) and insts[k].opname == "PRECALL":
        k += 1
    if k < len(insts) and insts[k].opname == "CALL" and insts[k].arg == 1:
        return k + 1, steps + [("len", None)]
    return j, steps


def _use(insts: list, j: int) -> str:
    """What consumes the value on top of the stack at instruction `j`."""
    depth = 1  # stack items at or above the value (or what it was combined into)
    for ins in insts[j:j + 60]:
        op = ins.opname
        if "JUMP_IF" in op or (op.startswith("POP_JUMP") and "IF" in op):
            if depth == 1:
                return BRANCH
            depth -= 1
            continue
        if op == "GET_ITER":
            return BRANCH if depth == 1 else VALUE
        if op == "BINARY_SLICE" and depth == 3:
            return VALUE  # Python 3.12's `container[a:b]`: the container is the deepest of the three
        if op == "BUILD_SLICE" or op == "BINARY_SLICE":
            pops = ins.arg if op == "BUILD_SLICE" else 3
            if pops >= depth:
                return SLICE
            depth += 1 - pops
            continue
        if op == "LOAD_GLOBAL" or op == "LOAD_ATTR":
            pops = 0 if op == "LOAD_GLOBAL" else 1
            pushes = pops + dis.stack_effect(ins.opcode, ins.arg, jump=False)
        elif op == "CALL":  # the callable, its self-or-NULL slot and the arguments
            pops, pushes = (ins.arg or 0) + 2, 1
        elif op in ("BUILD_TUPLE", "BUILD_LIST"):
            pops, pushes = ins.arg or 0, 1
        elif op in _STACK:
            pops, pushes = _STACK[op]
        else:
            return VALUE  # a store, a return, a jump, or an instruction not modelled
        if pops >= depth:
            if pushes != 1:
                return VALUE
            depth = 1
        else:
            depth += pushes - pops
    return VALUE
