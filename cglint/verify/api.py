"""`cglint.verify_function(fn, sample_args)`: prove on a real capture that `fn` is graph-safe.

GPU mode: two instrumented eager passes on a side stream (the warmup) record hazards and
the operator traces of two different inputs; then an instrumented capture, replays on
fresh inputs copied into the static inputs, compared with eager execution, and timing.
CPU mode (no CUDA, or CPU inputs): the two traced passes only; the report lists what
needed a GPU. The backends live in gpu_backend and cpu/backend.
"""
from __future__ import annotations

from typing import Any, Callable, Optional

from cglint import vocabulary
from cglint.findings import Region
from cglint.verify import backend
from cglint.verify.findings import frames
from cglint.verify.findings import rule_codes as rc
from cglint.verify.result import VerifyReport


def verify_function(
    fn: Callable[..., Any],
    sample_args: Any = (),
    *,
    make_inputs: Optional[Callable[[], Any]] = None,
    replays: int = 3,
    rtol: float = 1e-4,
    atol: float = 1e-5,
    warmup: int = 3,
    timing: bool = True,
    timing_iters: int = 20,
    measure_overhead: bool = False,
) -> VerifyReport:
    """Check that `fn(*sample_args)` can be captured and replayed as a CUDA graph.

    make_inputs: called with no arguments, returns a fresh argument tuple of the same shapes
    (default: random values of the sample's shapes, dtypes and integer ranges).
    replays: how many fresh inputs are replayed and compared with eager execution.
    """
    import torch

    from cglint.verify import inputs
    from cglint.verify.findings.recorder import Recorder
    from cglint.verify.findings.rule_metadata import message

    message(rc.CAPTURE_FAILED, "")  # the rule catalogue imports libcst: before any traced pass, not in one

    options = backend.Options(replays=replays, rtol=rtol, atol=atol, warmup=warmup, timing=timing,
                              timing_iters=timing_iters, measure_overhead=measure_overhead)
    sample = inputs.as_tuple(sample_args)
    caller = frames.current_user_frame(2)
    site = frames.where(caller) if caller else None
    region = Region(frames.display_path(site.path), site.line, vocabulary.capture_kind("function")) if site else None
    has_cuda_input = any(t.is_cuda for _, t in inputs.tensors(sample))
    chosen = backend.select(torch.cuda.is_available() and has_cuda_input)
    report = VerifyReport(mode=chosen.mode)
    recorder = Recorder(region, stop=caller, phase=chosen.trace_phase)
    if torch.cuda.is_available() and not has_cuda_input:
        report.notes.append("the sample inputs are on the CPU: ran the CPU trace; pass CUDA tensors for a trial capture")
    chosen.verify_function(fn, sample, make_inputs, recorder, report, options)
    report.findings = recorder.findings()
    return report
