"""One capture on the GPU under instrumentation, and what happens when it fails.

The monitor starts after capture_begin and stops before capture_end, so only captured
work is judged. Sync debug mode is set to "error" for exactly that window: PyTorch then
raises a plain error at a synchronizing operation instead of letting CUDA invalidate the
capture. The first error of a capture is translated into a finding at the user's line;
later ones (the cascade) are only evidence. After a failure the capture is ended and the
device synchronized, so that the next capture of the run starts clean.
"""
from __future__ import annotations

import gc
import sys
import time
from types import FrameType
from typing import Any, Optional

import torch

from cglint import vocabulary
from cglint.findings import Region
from cglint.verify.capture import sysmon
from cglint.verify.findings import errors, frames
from cglint.verify.findings import rule_codes as rc
from cglint.verify.capture.instrument import Instrumentation
from cglint.verify.findings.recorder import Observation, Recorder
from cglint.verify.findings.rule_metadata import message, meta
from cglint.verify.run.captures import NO_USER_FRAME, CaptureRecord


def region_kind() -> str:
    """What started this capture, judged from the torch frames on the stack."""
    frame: Optional[FrameType] = sys._getframe(1)
    kind = vocabulary.capture_kind("capture_span")
    while frame is not None:
        name, path = frame.f_code.co_name, frame.f_code.co_filename
        if "_inductor" in path or "_dynamo" in path:
            return vocabulary.capture_kind("compiled")
        if name == "make_graphed_callables":
            return vocabulary.capture_kind("graphed_callables")
        if name == "__enter__" and path.endswith("graphs.py"):
            kind = vocabulary.capture_kind("graph_block")
        frame = frame.f_back
    return kind


class CaptureMonitor:
    def __init__(self, *, operators: bool = True, sync_debug: bool = True, kind: Optional[str] = None,
                 trace_ops: bool = False, owned_generators: tuple[Any, ...] = ()):
        """operators: run the dispatch mode too (each ATen operator seen: library hazards and in-place
        writes; several times the cost of a bare capture)."""
        site = frames.current_user_frame(2)
        self.site = site
        self.site_offset = site.f_lasti if site else -1  # where the capture began in the site's code
        where = frames.where(site) if site else None
        region = Region(frames.display_path(where.path), where.line, kind or region_kind()) if where else None
        self.recorder = Recorder(region=region, stop=site, phase="capture")
        # torch.compile's own captures run generated code; torch modes there would only change its guards
        modes = region.kind != vocabulary.capture_kind("compiled") if region else True
        # Without the dispatch mode, a light capture sees torch calls through wrappers (callpatches)
        # where the tracers are on sys.monitoring; on 3.11 the function mode also keeps the
        # settrace tracers out of torch's own code.
        self.inst = Instrumentation(self.recorder, gpu=True, operators=operators, torch_modes=modes,
                                    trace_ops=trace_ops, owned_generators=owned_generators, guard_reads=modes,
                                    call_patches=not operators and sysmon.AVAILABLE)
        self.error: Optional[BaseException] = None
        self.cause: Optional[Observation] = None
        self.sync_debug = sync_debug
        self._saved_mode: Optional[int] = None
        self.started_at = 0.0
        self.seconds = 0.0
        self._collecting = False  # the garbage collector was on when the capture began

    def record(self, **state: Any) -> CaptureRecord:
        """This capture as the report lists it, with `state` (ok, capture_seconds, ...)."""
        return CaptureRecord.at(self.recorder.region, no_frame=NO_USER_FRAME, **state)

    @property
    def label(self) -> str:
        return self.record().label

    def start(self) -> "CaptureMonitor":
        self.started_at = time.perf_counter()
        # The instrumentation's own objects (guards, weak references) would set off full collections
        # of torch's large heap inside the capture (measured: 350 ms captures among 180 ms ones);
        # collection waits for the capture's end instead.
        self._collecting = gc.isenabled()
        gc.disable()
        if self.sync_debug:
            self._saved_mode = torch.cuda.get_sync_debug_mode()
            torch.cuda.set_sync_debug_mode("error")
        self.inst.start()
        return self

    def stop(self) -> None:
        if not self.inst.running:
            return
        self.inst.stop()
        if self._collecting:
            gc.enable()
        if self._saved_mode is not None:
            torch.cuda.set_sync_debug_mode(self._saved_mode)
            self._saved_mode = None
        self.seconds = time.perf_counter() - self.started_at

    def failed(self, exc: BaseException) -> None:
        """Record an error of this capture: the first is the cause, later ones evidence."""
        if exc is self.error:
            return
        note = errors.first_line(exc)
        if self.error is not None:
            if self.cause is not None:
                self.cause.add(f"then: {note}")
            return
        self.error = exc
        if errors.is_cascade(exc):
            # CUDA only says an earlier call broke the capture; blame the first hazard seen
            first = next((o for o in self.recorder.observations.values() if meta(o.code).severity == "error"), None)
            if first is not None:
                first.add(f"capture invalidated after this: {note}")
                self.cause = first
                return
        self.cause = record_error(self.recorder, exc)


def record_error(recorder: Recorder, exc: BaseException) -> Optional[Observation]:
    from cglint.verify.capture.classify import library_hit

    code, meaning = errors.meaning(exc)
    text = errors.first_line(exc)
    raised = errors.where_raised(exc.__traceback__)
    if raised is not None:
        code, meaning = library_hit((code, meaning), errors.library_frames(exc.__traceback__), raised[1])
    trace: tuple[str, ...]
    if raised is None:
        frame = recorder.stop
        if frame is None:
            return None
        where, trace = frames.where(frame), ()
    else:
        where, frame = raised
        trace = tuple(w.label() for w in frames.user_stack(frame, recorder.stop))
    if code == rc.OPTIMIZER_NOT_CAPTURABLE:
        _blame_optimizer_build(recorder, exc, where, text)
    same_line = [o for o in recorder.at_line(where) if not o.weak]
    for obs in same_line:
        obs.add(f"capture failed here: {text}")
    if same_line:
        return same_line[0]
    if code in (rc.RUNTIME_SYNC, rc.CAPTURE_FAILED):  # runtime rules: their message frames the meaning
        what = message(code, meaning)
    else:
        what = meaning
    return recorder.observe_at(code, what, where, trace, evidence=f"capture failed here: {text}")


# Where each optimizer of a verified run was built (set by the session patches on Optimizer.__init__).
BUILT_AT = "_cglint_built_at"


def _blame_optimizer_build(recorder: Recorder, exc: BaseException, step: frames.Where, text: str) -> None:
    """A non-capturable optimizer stepped in the capture: the fix is where it was built, so that
    line is a finding too."""
    tb = exc.__traceback__
    while tb is not None:
        owner = tb.tb_frame.f_locals.get("self")
        built = getattr(owner, BUILT_AT, None) if isinstance(owner, torch.optim.Optimizer) else None
        if built is not None:
            recorder.observe_at(
                rc.OPTIMIZER_NOT_CAPTURABLE,
                f"`{type(owner).__name__}` is built here without capturable=True and its step() at "
                f"{frames.display_path(step.path)}:{step.line} is captured; PyTorch refuses to capture it",
                built, (), evidence=f"capture failed at its step(): {text}")
            return
        tb = tb.tb_next


def record_failed_call(session: Any, exc: BaseException, kind: str) -> None:
    """A capture API call (capture_begin, make_graphed_callables) raised before any capture
    could report it: a failed capture, and a finding at the line of the user's call."""
    if id(exc) in session.handled:
        return  # a capture inside the call reported it already
    site = frames.current_user_frame(2)
    where = frames.where(site) if site else None
    region = Region(frames.display_path(where.path), where.line, kind) if where else None
    recorder = Recorder(region, stop=site, phase="capture")
    record_error(recorder, exc)
    session.handled.add(id(exc))
    session.recorders.append(recorder)
    session.add_graph(CaptureRecord.at(region, kind, ok=False, error=errors.first_line(exc)))


def reset_after_failure(graph: Any, end_capture: Any = None, stream_ctx: Any = None, *, end_failed: bool = False) -> None:
    """Leave the device, the allocator and the RNG usable after a failed capture.

    end_capture: given when the capture was begun but never ended. A capture that CUDA
    invalidated must still be ended; that raises the cascade error, and then PyTorch skips
    the end of the pool's allocation and the generators' capture epilogue, so both are
    repaired here.
    """
    if end_capture is not None:
        try:
            end_capture(graph)
        except Exception:  # noqa: BLE001 - the cascade error of an invalidated capture
            end_failed = True
    if stream_ctx is not None:
        try:
            stream_ctx.__exit__(None, None, None)
        except Exception:  # noqa: BLE001 - cleanup goes on whatever fails
            pass
    if end_failed:
        release_pool(graph)
        _heal_generators()
    try:
        torch.cuda.synchronize()
    except Exception:  # noqa: BLE001 - cleanup goes on whatever fails
        pass


def _heal_generators() -> None:
    """Run one clean capture: its capture_end runs the epilogue the failed one skipped."""
    try:
        graph = torch.cuda.CUDAGraph()
        graph._cglint_api = True  # type: ignore[attr-defined]  # not a user capture
        with torch.cuda.stream(torch.cuda.Stream()):
            graph.capture_begin()
            torch.zeros(1, device="cuda").add_(1)
            graph.capture_end()
        torch.cuda.synchronize()
        graph.reset()
    except Exception:  # noqa: BLE001 - a best effort: the device may be beyond repair
        pass


def release_pool(graph: Any) -> None:
    """A capture_end that raised never ended the pool's allocation; end and release it here."""
    if getattr(graph, "_cglint_pool_released", False):
        return
    graph._cglint_pool_released = True
    try:
        pool, device = graph.pool(), torch.cuda.current_device()
    except Exception:  # noqa: BLE001 - no pool to release
        return
    for name in ("_cuda_endAllocateToPool", "_cuda_endAllocateCurrentStreamToPool"):
        end = getattr(torch._C, name, None)
        if end is not None:
            try:
                end(device, pool)
            except Exception:  # noqa: BLE001 - cleanup goes on whatever fails
                pass
            break


def pool_bytes(graph: Any) -> Optional[int]:
    """Bytes reserved in the graph's private memory pool (None when torch cannot tell)."""
    try:
        pool = tuple(graph.pool())
        segments = torch.cuda.memory_snapshot()
    except Exception:  # noqa: BLE001 - torch cannot tell
        return None
    return sum(s.get("total_size", 0) for s in segments if tuple(s.get("segment_pool_id", ())) == pool)
