"""`cglint.verify(fn, sample_args)`: prove on a real capture that `fn` is graph-safe.

GPU mode: two instrumented eager passes on a side stream (the warmup) record hazards and
the operator traces of two different inputs; then an instrumented capture, replays on
fresh inputs copied into the static inputs, compared with eager execution, and timing.
CPU mode (no CUDA, or CPU inputs): the two traced passes only; the report lists what
needed a GPU.
"""
from __future__ import annotations

import gc
import time
from typing import Any, Callable, Optional

from cglint.findings import Region
from cglint.verify import codes, frames
from cglint.verify.result import VerifyReport

CPU_SKIPPED = [
    "trial capture: capture errors, sync debug mode, stream and event hooks (needs a GPU)",
    "replay against eager on fresh inputs (needs a GPU)",
    "graph pool memory and eager-versus-replay time (needs a GPU)",
    "device-to-host copies inside library code (every tensor is on the CPU in trace mode)",
]


def verify(
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
    from cglint.verify.recorder import Recorder

    sample = inputs.as_tuple(sample_args)
    caller = frames.current_user_frame(2)
    site = frames.where(caller) if caller else None
    region = Region(frames.display_path(site.path), site.line, "cglint.verify") if site else None
    has_cuda_input = any(t.is_cuda for _, t in inputs.tensors(sample))
    gpu = torch.cuda.is_available() and has_cuda_input
    report = VerifyReport(mode="gpu" if gpu else "cpu")
    recorder = Recorder(region, stop=caller, phase="eager trace" if gpu else "CPU trace")
    if torch.cuda.is_available() and not has_cuda_input:
        report.notes.append("the sample inputs are on the CPU: ran the CPU trace; pass CUDA tensors for a trial capture")
    if gpu:
        from cglint.verify.gpu import run_gpu

        run_gpu(fn, sample, make_inputs, recorder, report, replays=replays, rtol=rtol, atol=atol, warmup=warmup,
                timing=timing, timing_iters=timing_iters, measure_overhead=measure_overhead)
    else:
        static = inputs.clone(sample)
        fn(*static)  # one plain call first: lazy initialisation is not a difference between inputs
        _, first = traced(fn, static, recorder, gpu=False)
        second_pass(fn, sample, make_inputs, recorder, first, report, gpu=False)
        report.skipped.extend(CPU_SKIPPED)
    report.findings = recorder.findings()
    return report


def traced(fn: Callable, args: tuple, recorder: Any, *, gpu: bool) -> tuple[Any, list]:
    """Run `fn` once under instrumentation; returns (output, operator trace)."""
    from cglint.verify.instrument import Instrumentation

    inst = Instrumentation(recorder, gpu=gpu)
    with inst:
        out = fn(*args)
    return out, inst.ops.trace if inst.ops else []


def second_pass(fn: Callable, sample: tuple, make_inputs: Any, recorder: Any, first: list, report: VerifyReport,
                *, gpu: bool) -> None:
    """Trace a second, different input and compare operator sequences and shapes."""
    from cglint.verify import inputs, structure

    other = inputs.fresh(sample, make_inputs, 0)
    saved_phase, recorder.phase = recorder.phase, "second input"
    try:
        _, second = traced(fn, inputs.clone(other), recorder, gpu=gpu)
    except Exception as exc:  # random values can be invalid inputs (indices, say)
        report.notes.append(f"second input failed eagerly, traces not compared: {type(exc).__name__}: {exc}")
        return
    finally:
        recorder.phase = saved_phase
    structure.compare(first, second, recorder)


def fn_where(fn: Callable) -> Optional[frames.Where]:
    """Where `fn` is defined (for findings about the whole function: divergence, cost)."""
    target = getattr(fn, "forward", fn)
    code = getattr(getattr(target, "__func__", target), "__code__", None)
    if code is None:
        return None
    return frames.Where(code.co_filename, code.co_firstlineno, 1, code.co_firstlineno, 0, code.co_name)


def observe_fn(recorder: Any, fn: Callable, code: str, what: str, evidence: str) -> None:
    where = fn_where(fn)
    if where is not None:
        message = codes.runtime_rule(code).message.format(what=what)
        recorder.observe_at(code, message, where, (where.label(),), evidence=evidence)


def timed_ms(call: Callable[[], Any], iters: int) -> float:
    import torch

    for _ in range(3):
        call()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iters):
        call()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / iters


def wall_ms(call: Callable[[], Any]) -> float:
    gc.collect()
    t0 = time.perf_counter()
    call()
    return (time.perf_counter() - t0) * 1000
