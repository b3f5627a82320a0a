"""A code object's instructions as the verifier reads them, the same on every Python it runs on.

Instruction names and line attributes moved between 3.11 and 3.14 (`line_number`,
superinstructions such as LOAD_FAST_LOAD_FAST whose argument is a pair of names): the
verifier's bytecode readers (what a capture's output was assigned to, which loop variables
enclose a capture, where a compiled call's result goes) go through this module.
"""
from __future__ import annotations

import dis
import functools
from types import CodeType
from typing import Any

STORES = ("STORE_FAST", "STORE_NAME", "STORE_GLOBAL", "STORE_DEREF")
LOADS = ("LOAD_FAST", "LOAD_NAME", "LOAD_GLOBAL", "LOAD_DEREF", "LOAD_FAST_CHECK", "LOAD_FAST_AND_CLEAR",
         "LOAD_FAST_LOAD_FAST", "LOAD_FAST_BORROW", "LOAD_FAST_BORROW_LOAD_FAST_BORROW", "LOAD_CLOSURE")

Instruction = tuple[int, str, Any, int]  # (offset, opname, argval, line)


@functools.lru_cache(maxsize=512)
def instructions(code: CodeType) -> tuple[Instruction, ...]:
    """(offset, opname, argval, line) of each instruction, CACHE entries left out."""
    out, line = [], code.co_firstlineno
    for ins in dis.get_instructions(code):
        if ins.opname == "CACHE":
            continue
        number = getattr(ins, "line_number", None)
        if number is None:
            positions = getattr(ins, "positions", None)
            number = positions.lineno if positions is not None and positions.lineno else None
        if number is None and isinstance(ins.starts_line, int) and not isinstance(ins.starts_line, bool):
            number = ins.starts_line
        line = number or line
        out.append((ins.offset, ins.opname, ins.argval, line))
    return tuple(out)


def names(argval: Any) -> tuple[str, ...]:
    """The names an instruction's argument holds (two for a superinstruction)."""
    return tuple(argval) if isinstance(argval, tuple) else (argval,)


@functools.lru_cache(maxsize=512)
def stores(code: CodeType) -> tuple[tuple[str, int, int], ...]:
    """(target, line, offset) of every store to a name, or to an attribute of a loaded name
    (`self.static_out`), in `code`."""
    found = []
    previous = None
    for offset, op, arg, line in instructions(code):
        if op in STORES:
            found.append((arg, line, offset))
        elif op == "STORE_ATTR" and previous is not None and previous[1] in LOADS:
            found.append((f"{names(previous[2])[-1]}.{arg}", line, offset))
        previous = (offset, op, arg, line)
    return tuple(found)
