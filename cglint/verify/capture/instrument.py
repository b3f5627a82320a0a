"""One instrumented run: torch hooks, the host tracer and the sync hooks, on and off together."""
from __future__ import annotations

import threading
from typing import Any, Optional

from cglint.verify.capture import synchooks
from cglint.verify.findings import frames
from cglint.verify.guards import guardset
from cglint.verify.run import reach
from cglint.verify.capture.callpatches import CallPatches
from cglint.verify.guards.collector import GuardReadCollector
from cglint.verify.capture.hosttrace import HostTracer
from cglint.verify.findings.recorder import Recorder
from cglint.verify.capture.torchmodes import ApiMode, OpMode


class Instrumentation:
    """Start after capture_begin (or before a traced call), stop before capture_end."""

    def __init__(self, recorder: Recorder, *, gpu: bool, host: bool = True, operators: bool = True,
                 torch_modes: bool = True, trace_ops: bool = True, owned_generators: tuple[Any, ...] = (),
                 guard_reads: bool = False, call_patches: bool = False):
        self.recorder = recorder
        self.gpu = gpu
        self.owned_generators = owned_generators  # registered with the capturing graph
        self.thread = threading.get_ident()
        self.ops: Optional[OpMode] = None
        self._api: Optional[ApiMode] = None
        self._patches: Optional[CallPatches] = None
        self._host = HostTracer(self) if host else None
        # The TorchFunctionMode, or wrappers of only the torch callables it classifies (callpatches)
        self.api_mode = torch_modes and not call_patches
        self.call_patches = torch_modes and call_patches
        self.op_mode = torch_modes and operators  # the TorchDispatchMode
        self.trace_ops = trace_ops  # keep the operator sequence (to compare two inputs)
        self._own_hooks = False
        self.running = False
        self._collector: Optional[GuardReadCollector] = None
        self.guard_reads = guard_reads  # a capture: collect replay guards (see guards)
        self.guards: Optional[guardset.GuardSet] = None
        self._reach: Optional[reach.Window] = None  # --save-reach: the functions this capture runs

    def start(self) -> "Instrumentation":
        frames.refresh()
        self.thread = threading.get_ident()
        if self.op_mode:
            self.ops = OpMode(self)
            self.ops.__enter__()
        if self.api_mode:
            self._api = ApiMode(self)
            self._api.__enter__()
        if self.call_patches:
            self._patches = CallPatches(self).start()
        if self._host:
            self._host.start()
        if self.gpu:
            self._own_hooks = synchooks.install()
        synchooks.activate(self)
        if self.guard_reads:
            self._collector = GuardReadCollector(self.recorder).start()
        self._reach = reach.begin(self)  # last on, first off: its trace function chains the collector's
        self.running = True
        return self

    def stop(self) -> None:
        if not self.running:
            return
        self.running = False
        if self._reach is not None:
            self._reach.stop()
            self._reach = None
        if self._collector is not None:
            self.guards, self._collector = self._collector.stop(), None
        synchooks.deactivate(self)
        if self._own_hooks:
            synchooks.uninstall()
            self._own_hooks = False
        if self._host:
            self._host.stop()
        if self._patches is not None:
            self._patches.stop()
            self._patches = None
        # Leave the modes in the order they were entered, innermost first.
        for mode in (self._api, self.ops):
            if mode is None:
                continue
            try:
                mode.__exit__(None, None, None)
            except Exception:  # noqa: BLE001 - a mode pushed by user code on top of ours; ours is gone anyway
                pass

    def __enter__(self) -> "Instrumentation":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
