"""Instrument every capture of a running program (`cglint verify SCRIPT`, `pytest --cglint-verify`).

CUDAGraph.capture_begin/capture_end are the one path that torch.cuda.graph,
make_graphed_callables, raw captures and torch.compile's CUDA graph trees all take, so
the monitor hangs there. torch.cuda.graph.__exit__ is wrapped too because only it sees
the exception that broke the capture body; replay() is wrapped to check, before each
replay, that the tensors the graph reads are still the captured ones and that the Python
values the capture read have not changed (guards).
"""
from __future__ import annotations

import functools
import sys
from typing import Any, Callable

import torch

from cglint import vocabulary
from cglint.verify.capture import synchooks
from cglint.verify.findings import errors, frames
from cglint.verify.guards import liveness
from cglint.verify.findings import rule_codes as rc
from cglint.verify.capture.attributes import Patched
from cglint.verify.capture.monitor import (BUILT_AT, CaptureMonitor, pool_bytes, record_failed_call, region_kind,
                                   release_pool, reset_after_failure)
from cglint.verify.compiled.kept_outputs import static_outputs_kept
from cglint.verify.findings.recorder import Recorder
from cglint.verify.run.captures import CaptureRecord
from cglint.verify.run.session import Session

_patched = Patched()
# Where a graph keeps the generators registered with it (register_generator_state).
OWNED_GENERATORS = "_cglint_generators"


def _patch(owner: Any, name: str, make: Callable[[Any], Any]) -> None:
    original = getattr(owner, name)
    _patched.set(owner, name, functools.wraps(original)(make(original)))


def owned_generators(graph: Any) -> tuple[Any, ...]:
    return tuple(graph.__dict__.get(OWNED_GENERATORS, ()))


def install(session: Session) -> None:
    if _patched:
        return
    graph_cls = torch.cuda.graphs.CUDAGraph
    original_end = graph_cls.__dict__["capture_end"]
    synchooks.install()
    _prewarm()

    def capture_begin(original):
        def wrapper(self, *args, **kwargs):
            try:
                original(self, *args, **kwargs)
            except Exception as exc:  # refused before anything was captured (the default stream)
                if not getattr(self, "_cglint_api", False):
                    record_failed_call(session, exc, region_kind())
                raise
            if getattr(self, "_cglint_api", False):
                return  # cglint.verify_function() instruments its own capture
            # No dispatch mode: on a GPU the capture's own error and sync debug mode locate the syncs
            # it would see, and it cost a serving engine's captures several times their bare time.
            monitor = CaptureMonitor(owned_generators=owned_generators(self), operators=False)
            self._cglint_monitor = monitor
            session.recorders.append(monitor.recorder)
            session.open[id(self)] = lambda exc: _abandon(self, monitor, exc, original_end)
            session.changed()  # a process that dies inside the capture still reports it, as failed
            monitor.start()
        return wrapper

    def capture_end(original):
        def wrapper(self, *args, **kwargs):
            monitor = self.__dict__.pop("_cglint_monitor", None)
            if monitor is None:
                return original(self, *args, **kwargs)
            session.open.pop(id(self), None)
            pending = sys.exc_info()[1]  # capture_end in a `finally:` while the body's error propagates
            if pending is not None and _raised_under(pending, monitor.site):
                monitor.failed(pending)
                session.handled.add(id(pending))
            monitor.stop()
            try:
                original(self, *args, **kwargs)
            except BaseException as exc:
                try:
                    monitor.failed(exc)
                    session.handled.add(id(exc))
                    _graph_done(session, monitor, ok=False)
                finally:
                    release_pool(self)
                raise
            ok = monitor.error is None
            held = monitor.inst.guards
            if ok and held is not None:
                frame = frames.current_user_frame(2)
                started = monitor.site_offset if frame is monitor.site else -1
                self._cglint_reads = liveness.Watch(liveness.snapshot(held.site_tensors, held.parameters(), frame,
                                                                      started))
                held.site_tensors = {}
                self._cglint_site = monitor.label
                self._cglint_recorder = monitor.recorder
                self._cglint_guards = monitor.inst.guards
            self._cglint_info = _graph_done(session, monitor, ok=ok, graph=self)
        return wrapper

    def replay(original):
        def wrapper(self, *args, **kwargs):
            state = self.__dict__
            reads, held = state.get("_cglint_reads"), state.get("_cglint_guards")
            if reads or (held is not None and held.pending):
                recorder = state.get("_cglint_replay_recorder") or Recorder(region=self._cglint_recorder.region,
                                                                            phase="replay")
                frame = frames.current_user_frame(2)
                explained = held.check(recorder, frame) if held is not None else set()
                if reads:
                    reads.check(recorder, frame, self._cglint_site, explained)
                    static_outputs_kept(recorder, frame, reads.outputs(), self._cglint_site)
                if recorder.observations:
                    session.recorders.append(recorder)
                    session.changed()
                    recorder = None
                self._cglint_replay_recorder = recorder  # unused: the next replay's
            info = state.get("_cglint_info")
            if info is not None:
                session.replayed_graph(info)
            return original(self, *args, **kwargs)
        return wrapper

    def graph_exit(original):
        def wrapper(self, exc_type, exc, tb):
            monitor = getattr(self.cuda_graph, "_cglint_monitor", None)
            if exc is None or monitor is None:
                return original(self, exc_type, exc, tb)
            try:
                monitor.failed(exc)
                session.handled.add(id(exc))
            finally:
                try:
                    original(self, exc_type, exc, tb)
                except Exception:  # noqa: BLE001
                    # capture_end raised (the cascade): torch left the capture stream current
                    reset_after_failure(self.cuda_graph, None, self.stream_ctx, end_failed=True)
            return False
        return wrapper

    def register_generator_state(original):
        def wrapper(self, generator, *args, **kwargs):
            result = original(self, generator, *args, **kwargs)
            self.__dict__.setdefault(OWNED_GENERATORS, []).append(generator)
            return result
        return wrapper

    def make_graphed_callables(original):
        def wrapper(*args, **kwargs):
            try:
                return original(*args, **kwargs)
            except Exception as exc:  # its checks (autocast cache, hooks) raise before any capture
                record_failed_call(session, exc, vocabulary.capture_kind("graphed_callables"))
                raise
        return wrapper

    def optimizer_init(original):
        def wrapper(self, *args, **kwargs):
            original(self, *args, **kwargs)
            caller = frames.current_user_frame(2)
            while caller is not None and caller.f_locals.get("self") is self:  # the user's subclass's __init__
                caller = frames.user_frame(caller.f_back)
            if caller is not None:
                self.__dict__[BUILT_AT] = frames.where(caller)
        return wrapper

    _patch(torch.optim.Optimizer, "__init__", optimizer_init)
    _patch(torch.cuda, "make_graphed_callables", make_graphed_callables)
    if hasattr(graph_cls, "register_generator_state"):  # not in older torch
        _patch(graph_cls, "register_generator_state", register_generator_state)
    _patch(graph_cls, "capture_begin", capture_begin)
    _patch(graph_cls, "capture_end", capture_end)
    _patch(graph_cls, "replay", replay)
    _patch(torch.cuda.graphs.graph, "__exit__", graph_exit)


def _prewarm() -> None:
    """The first use of the torch modes imports and initialises a lot, and so does the first finding's
    message (the rule catalogue imports every rule and libcst): do both before any capture."""
    from cglint.verify.capture.instrument import Instrumentation
    from cglint.verify.findings.rule_metadata import message

    message(rc.CAPTURE_FAILED, "")

    with Instrumentation(Recorder(), gpu=True, host=False):
        torch.ones(1).add(1)


def _abandon(graph: Any, monitor: CaptureMonitor, exc: Any, end: Any) -> None:
    """A raw capture_begin whose capture_end never ran: stop the hooks, blame the error, end the capture."""
    graph.__dict__.pop("_cglint_monitor", None)
    monitor.stop()
    try:
        if exc is not None:
            monitor.failed(exc)
    finally:
        reset_after_failure(graph, end)


def _raised_under(exc: BaseException, site: Any) -> bool:
    tb = exc.__traceback__
    while tb is not None:
        if tb.tb_frame is site:
            return True
        tb = tb.tb_next
    return False


def _graph_done(session: Session, monitor: CaptureMonitor, *, ok: bool, graph: Any = None) -> CaptureRecord:
    pool = pool_bytes(graph) if graph is not None else None
    error = errors.first_line(monitor.error) if monitor.error is not None else None
    record = monitor.record(ok=ok, capture_seconds=monitor.seconds, pool_bytes=pool, error=error)
    session.add_graph(record)
    return record


def uninstall() -> None:
    _patched.restore()
    synchooks.uninstall()
