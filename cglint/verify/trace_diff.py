"""Compare the operator traces of two inputs of equal shapes.

Both inputs go through the same eager code. If the operator sequences differ, Python took
another path for the second input (input-dependent-ops); if only shapes differ, an
operator's output size depends on data (input-dependent-shapes). Either way a graph
captured on one input is wrong for the other.
"""
from __future__ import annotations

from typing import Optional

from cglint.verify.findings import rule_codes as rc
from cglint.verify.findings.rule_metadata import message
from cglint.verify.findings.recorder import Recorder
from cglint.verify.capture.torchmodes import OpRecord


def _at(trace: list[OpRecord], i: int) -> Optional[OpRecord]:
    return trace[i] if i < len(trace) else None


def compare(first: list[OpRecord], second: list[OpRecord], recorder: Recorder) -> Optional[str]:
    """Record the first difference of two traces; returns its rule code or None."""
    for i in range(max(len(first), len(second))):
        a, b = _at(first, i), _at(second, i)
        if a is not None and b is not None and a.op == b.op and (a.code, a.line) == (b.code, b.line):
            if a.shapes != b.shapes:
                what = (f"aten.{a.op} gave shapes {list(a.shapes)} for the first input and "
                        f"{list(b.shapes)} for the second")
                _record(recorder, rc.INPUT_DEPENDENT_SHAPES, what, a)
                return rc.INPUT_DEPENDENT_SHAPES
            continue
        shown_a = f"aten.{a.op} at {a.where()}" if a else "nothing more"
        shown_b = f"aten.{b.op} at {b.where()}" if b else "nothing more"
        what = f"operator {i + 1} was {shown_a} for the first input but {shown_b} for the second"
        op = a or b
        assert op is not None  # i is within the longer trace
        _record(recorder, rc.INPUT_DEPENDENT_OPS, what, op)
        return rc.INPUT_DEPENDENT_OPS
    return None


def _record(recorder: Recorder, code: str, what: str, op: OpRecord) -> None:
    from cglint.verify.findings.frames import Where

    if op.code is None:
        return
    where = Where(op.code.co_filename, op.line, 1, op.line, 0, op.code.co_name)
    recorder.observe_at(code, message(code, what), where, (where.label(),), evidence="compared two inputs")
