"""The traced passes both backends run on the verified function: one on the sample
inputs, one on a different input whose operator trace is compared with the first."""
from __future__ import annotations

from typing import Any, Callable

from cglint.verify import inputs, trace_diff
from cglint.verify.capture.instrument import Instrumentation
from cglint.verify.findings.recorder import Recorder
from cglint.verify.result import VerifyReport


def traced(fn: Callable, args: tuple, recorder: Recorder, *, gpu: bool) -> tuple[Any, list]:
    """Run `fn` once under instrumentation; returns (output, operator trace)."""
    inst = Instrumentation(recorder, gpu=gpu)
    with inst:
        out = fn(*args)
    return out, inst.ops.trace if inst.ops else []


def second_pass(fn: Callable, sample: tuple, make_inputs: Any, recorder: Recorder, first: list, report: VerifyReport,
                *, gpu: bool) -> None:
    """Trace a second, different input and compare operator sequences and shapes."""
    other = inputs.fresh(sample, make_inputs, 0)
    saved_phase, recorder.phase = recorder.phase, "second input"
    try:
        _, second = traced(fn, inputs.clone(other), recorder, gpu=gpu)
    except Exception as exc:  # noqa: BLE001 - random values can be invalid inputs (indices, say)
        report.notes.append(f"second input failed eagerly, traces not compared: {type(exc).__name__}: {exc}")
        return
    finally:
        recorder.phase = saved_phase
    trace_diff.compare(first, second, recorder)
