"""The GPU backend: for a function, warmup traces, an instrumented capture, replays against
eager and timing; for scripts, the capture patches of `patches`."""
from __future__ import annotations

import gc
import time
from typing import TYPE_CHECKING, Any, Callable, Optional

import torch

from cglint.verify import inputs
from cglint.verify.capture import patches
from cglint.verify.compiled import regions
from cglint.verify.findings import errors, frames
from cglint.verify.guards import guardset, watchers
from cglint.verify.findings import rule_codes as rc
from cglint.verify.capture.monitor import CaptureMonitor, pool_bytes, reset_after_failure
from cglint.verify.compare import diverges
from cglint.verify.findings.recorder import Observation, Recorder
from cglint.verify.result import VerifyReport
from cglint.verify.findings.rule_metadata import message, meta
from cglint.verify.run.session import Session
from cglint.verify.trace_passes import second_pass, traced

if TYPE_CHECKING:
    from cglint.verify.backend import Options

# Findings that can explain why a replay diverged from eager execution.
_DIVERGENCE_SUSPECTS = ("control-flow", "cpu-rng", "host-effect", "frozen-scalar")


class GpuBackend:
    mode = "gpu"
    trace_phase = "eager trace"
    script_notes: tuple[str, ...] = ()

    def verify_function(self, fn: Callable[..., Any], sample: tuple, make_inputs: Optional[Callable[[], Any]],
                        recorder: Recorder, report: VerifyReport, options: "Options") -> None:
        run_gpu(fn, sample, make_inputs, recorder, report, replays=options.replays, rtol=options.rtol,
                atol=options.atol, warmup=options.warmup, timing=options.timing, timing_iters=options.timing_iters,
                measure_overhead=options.measure_overhead)

    def install(self, session: Session) -> None:
        patches.install(session)
        watchers.install()
        regions.install(session)

    def uninstall(self) -> None:
        regions.uninstall()
        watchers.uninstall()
        patches.uninstall()


def run_gpu(fn: Callable, sample: tuple, make_inputs: Any, recorder: Recorder, report: VerifyReport, *,
            replays: int, rtol: float, atol: float, warmup: int, timing: bool, timing_iters: int,
            measure_overhead: bool) -> None:
    static = inputs.clone(sample)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        # The warmup doubles as the two traced passes, after one plain call: lazy initialisation
        # (GradScaler, cuBLAS handles) would otherwise look like a difference between inputs.
        fn(*static)
        _, first = traced(fn, static, recorder, gpu=True)
        second_pass(fn, sample, make_inputs, recorder, first, report, gpu=True)
        for _ in range(max(0, warmup - 3)):
            fn(*static)
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()

    held: dict[str, Any] = {}
    report.capture_ms = wall_ms(lambda: held.setdefault("capture", capture(fn, static, instrument=True)))
    graph, static_out, monitor = held["capture"]
    recorder.merge(monitor.recorder)
    if monitor.error is not None:
        report.capture_error = errors.first_line(monitor.error)
        report.skipped.append("replay against eager and timing (the capture failed)")
        return
    report.pool_bytes = pool_bytes(graph)
    if measure_overhead:  # the same capture again without instrumentation (it runs second: warm caches)
        report.bare_capture_ms = bare_capture_ms(fn, static)
    stateful = _writes_state(monitor, static)
    if stateful:
        report.skipped.append(f"replay against eager: fn updates {stateful} tensor(s) it is not given "
                              "(parameters, optimizer state), so eager and replay start from different states")
    else:
        _replay_against_eager(fn, sample, make_inputs, graph, static, static_out, recorder, report,
                              replays=replays, rtol=rtol, atol=atol, guarded=monitor.inst.guards)
    if timing:
        _timing(fn, sample, make_inputs, graph, static, recorder, report, timing_iters)


def capture(fn: Callable, static: tuple, *, instrument: bool) -> tuple[Any, Any, CaptureMonitor]:
    """Capture `fn(*static)` as torch.cuda.graph would, keeping the first error and cleaning up after it."""
    graph = torch.cuda.CUDAGraph()
    graph._cglint_api = True  # type: ignore[attr-defined]  # the session patches, if installed, leave this capture to us
    # No input tracking or operator trace here: the API owns its inputs and traced the warmup.
    monitor = CaptureMonitor(kind="cglint.verify_function", sync_debug=instrument, trace_ops=False)
    stream = torch.cuda.Stream()
    torch.cuda.synchronize()
    with torch.cuda.stream(stream):
        graph.capture_begin()
        if instrument:
            monitor.start()
        try:
            out = fn(*static)
        except BaseException as exc:
            monitor.stop()
            try:
                if isinstance(exc, Exception):
                    monitor.failed(exc)
            finally:
                reset_after_failure(graph, type(graph).capture_end)
            if not isinstance(exc, Exception):
                raise
            return graph, None, monitor
        monitor.stop()
        try:
            graph.capture_end()
        except Exception as exc:  # noqa: BLE001 - the capture's error is the verifier's finding
            try:
                monitor.failed(exc)
            finally:
                reset_after_failure(graph, end_failed=True)
            return graph, None, monitor
    torch.cuda.synchronize()
    return graph, out, monitor


def bare_capture_ms(fn: Callable, static: tuple) -> Optional[float]:
    holder: dict[str, Any] = {}
    ms = wall_ms(lambda: holder.setdefault("g", capture(fn, static, instrument=False)))
    graph, _, monitor = holder["g"]
    graph.reset()
    return ms if monitor.error is None else None


def _writes_state(monitor: CaptureMonitor, static: tuple) -> int:
    ops = monitor.inst.ops
    if ops is None:
        return 0
    given = {id(t) for _, t in inputs.tensors(static)} | {id(t._base) for _, t in inputs.tensors(static)}
    return sum(1 for key, ref in ops.mutated.items() if ref() is not None and key not in given)


def _replay_against_eager(fn, sample, make_inputs, graph, static, static_out, recorder, report, *,
                          replays, rtol, atol, guarded=None) -> None:
    worst: dict[str, float] = {}
    for r in range(replays):
        new = inputs.fresh(sample, make_inputs, r + 1)
        inputs.copy_into(static, new)
        if guarded is not None:  # the eager calls in between may change what the capture read
            guarded.check(recorder, None)
        graph.replay()
        got = inputs.map_tensors(static_out, lambda t: t.detach().clone())
        expected = fn(*inputs.clone(new))
        for name, err in diverges(expected, got, rtol=rtol, atol=atol).items():
            worst[name] = max(err, worst.get(name, 0.0))
    report.divergence = worst
    if worst:
        shown = ", ".join(f"{k} max |replay - eager| = {v:.3g}" for k, v in worst.items())
        explained, related = guardset.explanation(guarded.changed.values() if guarded is not None else ())
        suspects = [o.finding() for o in recorder.observations.values()
                    if meta(o.code).category in _DIVERGENCE_SUSPECTS]
        hint = explained or ("; look at " + ", ".join(f"{f.code} {f.path}:{f.line}" for f in suspects[:3])
                             if suspects else "")
        obs = observe_fn(recorder, fn, rc.REPLAY_DIVERGES, f"{shown} over {replays} fresh inputs{hint}",
                         "replayed against eager")
        if obs is not None:
            for place in related:
                obs.relate(place)


def _timing(fn, sample, make_inputs, graph, static, recorder, report, iters: int) -> None:
    new = inputs.fresh(sample, make_inputs, 99)
    report.eager_ms = timed_ms(lambda: fn(*static), iters)

    def replay() -> None:
        inputs.copy_into(static, new)
        graph.replay()

    report.replay_ms = timed_ms(replay, iters)
    if report.replay_ms >= report.eager_ms:
        pool = f"; its pool holds {report.pool_bytes / 2**20:.1f} MiB" if report.pool_bytes else ""
        observe_fn(recorder, fn, rc.GRAPH_NOT_WORTH_IT,
                   f"replay with input copies takes {report.replay_ms:.3f} ms, eager {report.eager_ms:.3f} ms{pool}",
                   "timed with CUDA events")


def fn_where(fn: Callable) -> Optional[frames.Where]:
    """Where `fn` is defined (for findings about the whole function: divergence, cost)."""
    target = getattr(fn, "forward", fn)
    code = getattr(getattr(target, "__func__", target), "__code__", None)
    if code is None:
        return None
    return frames.Where(code.co_filename, code.co_firstlineno, 1, code.co_firstlineno, 0, code.co_name)


def observe_fn(recorder: Recorder, fn: Callable, code: str, what: str, evidence: str) -> Optional[Observation]:
    where = fn_where(fn)
    if where is None:
        return None
    return recorder.observe_at(code, message(code, what), where, (where.label(),), evidence=evidence)


def timed_ms(call: Callable[[], Any], iters: int) -> float:
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
