"""CPU trace mode for scripts: CUDA emulated on the CPU.

With no CUDA, torch.cuda.graph, CUDAGraph and streams cannot even be constructed, and code
that says "cuda" stops at its first tensor. Here "cuda" devices become the CPU (EmulatedCuda)
and the torch.cuda API a capturing script calls has stand-ins, so a script written for CUDA
runs its capture code: the body of every "capture" runs once under the same instrumentation
as a real capture, replay() checks the capture's replay guards and then runs again the
operators the capture recorded, on the tensors it used (a script that reads its outputs after
each replay sees new values, as on a GPU, with the Python values frozen at capture), and
streams, events and synchronize are no-ops that still record CG104 inside a region.
"""
from __future__ import annotations

import contextlib
import functools
import time
from typing import Any, Literal, Optional

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._device import DeviceContext
from torch.utils._python_dispatch import TorchDispatchMode

from cglint import vocabulary
from cglint.findings import Region
from cglint.verify.capture import synchooks
from cglint.verify.findings import errors, frames
from cglint.verify.guards import guardset
from cglint.verify.capture.attributes import Patched
from cglint.verify.capture.classify import EMULATED_CUDA
from cglint.verify.capture.instrument import Instrumentation
from cglint.verify.findings.recorder import Recorder
from cglint.verify.run.captures import CaptureRecord
from cglint.verify.run.session import Session

_patched = Patched()
_depth = [0]  # regions being traced (is_current_stream_capturing answers from it)


class _Trace:
    """One emulated capture: its region traced on the CPU, open in the session until it ends."""

    def __init__(self, session: Session, kind: str, graph: Any = None) -> None:
        site = frames.current_user_frame(4)
        where = frames.where(site) if site else None
        region = Region(frames.display_path(where.path), where.line, kind) if where else None
        self.session, self.kind, self.region = session, kind, region
        self.info: Optional[CaptureRecord] = None  # once the capture ended
        self.site = CaptureRecord.at(region, kind).label
        recorder = Recorder(region, stop=site, phase="CPU trace")
        session.recorders.append(recorder)
        session.open[id(self)] = lambda exc: self.stop(exc)
        _depth[0] += 1
        self.started = time.perf_counter()
        owned = tuple(getattr(graph, "generators", ()))
        # Under the instrumentation's modes, which see every operator first, as written.
        self.recording: Optional[_Recording] = _Recording().__enter__() if graph is not None else None
        self.inst = Instrumentation(recorder, gpu=False, owned_generators=owned, guard_reads=True).start()
        session.changed()

    def stop(self, exc: Optional[BaseException] = None) -> None:
        if not self.inst.running:
            return
        self.inst.stop()
        if self.recording is not None:
            try:
                self.recording.__exit__(None, None, None)
            except Exception:  # noqa: BLE001 - a mode pushed by user code on top of ours; ours is gone anyway
                pass
            if exc is not None:
                self.recording = None  # a failed capture replays nothing
        _depth[0] -= 1
        self.session.open.pop(id(self), None)
        error = None if exc is None else errors.first_line(exc)
        self.info = CaptureRecord.at(self.region, self.kind, ok=exc is None,
                                     capture_seconds=time.perf_counter() - self.started, error=error)
        self.session.add_graph(self.info)


# Operators with no kernel on a GPU: a graph's replay leaves their memory as it is.
_NO_KERNEL = vocabulary.runtime_names("factories.uninitialized")
_RECORDED_MAX = 200_000  # operators kept for replay; a longer capture replays nothing
_PINNING = vocabulary.runtime_names("sync.pin_memory", "methods")


class _Recording(TorchDispatchMode):
    """The aten operators a captured region ran, with their arguments and results: what a
    CUDA graph records, so that replay() can run them again on the CPU."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[Any, tuple, dict, Any]] = []
        self.complete = True

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if getattr(func, "namespace", None) == "aten" and func._opname not in _NO_KERNEL:
            if len(self.calls) < _RECORDED_MAX:
                self.calls.append((func, args, kwargs, out))
            else:
                self.complete = False
        return out

    def replay(self) -> Optional[str]:
        """Run the recorded operators again, writing each result into the tensor the capture
        got (later operators and the script read those); returns why it stopped, if it did."""
        if not self.complete:
            return f"the capture ran more than {_RECORDED_MAX} operators"
        try:
            from torch.utils._python_dispatch import _disable_current_modes
        except ImportError:  # pragma: no cover - older torch
            _disable_current_modes = contextlib.nullcontext  # type: ignore[assignment]
        with _disable_current_modes(), torch.no_grad():
            for func, args, kwargs, out in self.calls:
                try:
                    result = func(*args, **kwargs)
                except Exception as exc:  # noqa: BLE001 - reported in the notes, the script goes on
                    return f"aten.{func._opname} failed when run again ({errors.first_line(exc)})"
                _write_back(out, result)
        return None


def _write_back(recorded: Any, result: Any) -> None:
    """Copy a rerun operator's result into the tensor(s) the capture got, where they differ."""
    if isinstance(recorded, (tuple, list)) and isinstance(result, (tuple, list)) and len(recorded) == len(result):
        for old, new in zip(recorded, result):
            _write_back(old, new)
        return
    if not (isinstance(recorded, torch.Tensor) and isinstance(result, torch.Tensor)) or recorded is result:
        return
    if recorded.shape != result.shape or recorded.dtype != result.dtype:
        return  # a size decided by data: a graph cannot replay it either (the capture reports it)
    try:
        if recorded.untyped_storage().data_ptr() == result.untyped_storage().data_ptr():
            return  # a view or an in-place result: already written
        recorded.copy_(result)
    except RuntimeError:  # storage-less or otherwise unwritable tensors: nothing a script reads
        pass


def _start(session: Session, kind: str, graph: Any = None) -> _Trace:
    return _Trace(session, kind, graph)


def _counting_replays(graphed: Any, session: Session, trace: "_Trace") -> Any:
    """A graphed callable whose calls count as replays of its capture, as torch's replay the
    graph on each call (a module only in the training mode it was captured in)."""
    if isinstance(graphed, torch.nn.Module):
        forward, training = graphed.forward, graphed.training

        def counted_forward(*args: Any, **kwargs: Any) -> Any:
            if graphed.training == training and trace.info is not None:
                session.replayed_graph(trace.info)
            return forward(*args, **kwargs)

        graphed.forward = counted_forward
        return graphed

    @functools.wraps(graphed)
    def counted(*args: Any, **kwargs: Any) -> Any:
        if trace.info is not None:
            session.replayed_graph(trace.info)
        return graphed(*args, **kwargs)

    return counted


def _stop(trace: Optional[_Trace], exc: Optional[BaseException] = None) -> None:
    if trace is not None:
        trace.stop(exc)


class ShimEvent:
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def record(self, stream: Any = None) -> None: ...
    def wait(self, stream: Any = None) -> None: ...
    def elapsed_time(self, other: Any) -> float:
        return 0.0

    query = synchooks.wrap_function(lambda self: True, "Event.query()")
    synchronize = synchooks.wrap_function(lambda self: None, "Event.synchronize()")


class ShimStream:
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def wait_stream(self, stream: Any) -> None: ...
    def wait_event(self, event: Any) -> None: ...
    def record_event(self, event: Any = None) -> ShimEvent:
        return event or ShimEvent()

    query = synchooks.wrap_function(lambda self: True, "Stream.query()")
    synchronize = synchooks.wrap_function(lambda self: None, "Stream.synchronize()")


def _is_cuda(value: Any) -> bool:
    if isinstance(value, torch.device):
        return value.type == "cuda"
    return isinstance(value, str) and (value == "cuda" or value.startswith("cuda:"))


def _on_cpu(value: Any) -> Any:
    return torch.device("cpu") if _is_cuda(value) else value


# The devices the emulation made the CPU where the script said "cuda" (torch.device objects are
# distinct, so identity tells them apart); newest last, a bounded number: a script makes a
# few, and 4096 keeps every one of those while a loop that makes one per step stays bounded.
_meant_cuda: dict[int, Any] = {}
_MEANT_CUDA_KEPT = 4096


def _remember_cuda(device: Any) -> Any:
    _meant_cuda[id(device)] = device
    if len(_meant_cuda) > _MEANT_CUDA_KEPT:
        del _meant_cuda[next(iter(_meant_cuda))]
    return device


def meant_cuda(device: Any) -> bool:
    """Whether the script named this device "cuda" (before the emulation made it the CPU)."""
    return _is_cuda(device) or _meant_cuda.get(id(device)) is device


class EmulatedCuda(TorchFunctionMode):
    """Runs code written for CUDA on the CPU: every "cuda" device a torch call names becomes
    the CPU (factories, .to(), .cuda(), `with torch.device("cuda")`), host pinning is a no-op.
    It sits under the verifier's own modes, which still see the calls as written."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = dict(kwargs or {})
        name = getattr(func, "__name__", "")
        if func is torch.device and args and _is_cuda(args[0]):
            return _remember_cuda(torch.device("cpu"))
        if name == "cuda" and args and isinstance(args[0], (torch.Tensor, torch.nn.Module)):
            return args[0]
        if name in _PINNING and args and isinstance(args[0], torch.Tensor):
            return args[0]  # nothing to pin on the CPU
        if name == "is_pinned" and args and isinstance(args[0], torch.Tensor):
            return False
        if "device" in kwargs:
            kwargs["device"] = _on_cpu(kwargs["device"])
        if kwargs.get("pin_memory"):
            kwargs["pin_memory"] = False
        if name == "to" and len(args) > 1 and isinstance(args[1], int) and not isinstance(args[1], bool):
            args = (args[0], torch.device("cpu"), *args[2:])  # .to(0): the first GPU
        args = tuple(_on_cpu(a) for a in args)
        return func(*args, **kwargs)


class EmulatedGenerator(torch._C.Generator):
    """torch.Generator(device="cuda") on the CPU."""

    def __new__(cls, device: Any = "cpu") -> Any:
        return torch._C.Generator.__new__(cls, device=_on_cpu(device))  # type: ignore[call-arg]  # torch's stub lacks it

    def __init__(self, device: Any = "cpu") -> None:
        pass


_mode: list[EmulatedCuda] = []
EMULATED_DEVICE_NAME = "CUDA emulated on the CPU (cglint verify)"
# torch.cuda functions that need a device, answered as a single emulated GPU would.
_DEVICE_QUERIES = {
    "is_available": lambda: True,
    "device_count": lambda: 1,
    "current_device": lambda: 0,
    "set_device": lambda device: None,
    "get_device_name": lambda device=None: EMULATED_DEVICE_NAME,
    "get_device_capability": lambda device=None: (8, 0),
    "is_bf16_supported": lambda *args, **kwargs: True,
    "get_rng_state": lambda device="cuda": torch.get_rng_state(),
    "set_rng_state": lambda state, device="cuda": torch.set_rng_state(state),
    "empty_cache": lambda: None,
    "init": lambda: None,
}


def install(session: Session) -> None:
    if _patched:
        return

    class ShimGraph:
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            self._inst: Optional[_Trace] = None
            self.generators: list[Any] = []  # registered: they advance on every replay

        def register_generator_state(self, generator: Any) -> None:
            self.generators.append(generator)

        def capture_begin(self, *args: Any, **kwargs: Any) -> None:
            self._inst = _start(session, vocabulary.capture_kind("capture_span"), self)

        def capture_end(self) -> None:
            _stop(self._inst)

        def replay(self) -> None:
            if self._inst is not None and self._inst.info is not None:
                session.replayed_graph(self._inst.info)
            guardset.check_replay(self._inst.inst if self._inst is not None else None, session)
            if self._inst is not None and self._inst.recording is not None:
                stopped = self._inst.recording.replay()
                if stopped is not None:
                    self._inst.recording = None
                    session.note(f"replay() of the capture at {self._inst.site} stopped computing on the CPU: {stopped}; "
                                 "from then on its outputs kept their values")

        def reset(self) -> None: ...
        def pool(self) -> tuple:
            return (0, 0)

    class ShimGraphContext:
        def __init__(self, cuda_graph: Any = None, pool: Any = None, stream: Any = None, **kwargs: Any) -> None:
            self._inst: Optional[_Trace] = None
            self.cuda_graph = cuda_graph

        def __enter__(self) -> None:
            self._inst = _start(session, vocabulary.capture_kind("graph_block"), self.cuda_graph)
            if self.cuda_graph is not None:
                self.cuda_graph._inst = self._inst  # its replay() checks this capture's guards

        def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> Literal[False]:
            _stop(self._inst, exc)
            if self.cuda_graph is not None:
                self.cuda_graph._inst = self._inst
            return False

    def make_graphed_callables(callables: Any, sample_args: Any, *args: Any, **kwargs: Any) -> Any:
        single = not isinstance(callables, tuple)
        fns, samples = ((callables,), (sample_args,)) if single else (callables, sample_args)
        graphed = []
        for fn, sample in zip(fns, samples):
            trace = _start(session, vocabulary.capture_kind("graphed_callables"))
            try:
                fn(*sample)
            except BaseException as exc:
                _stop(trace, exc)
                raise
            _stop(trace)
            graphed.append(_counting_replays(guardset.graphed(fn, trace.inst, session), session, trace))
        return graphed[0] if single else tuple(graphed)

    def stream_ctx(stream: Any = None) -> Any:
        return contextlib.nullcontext()

    replacements = {
        "graph": ShimGraphContext,
        "CUDAGraph": ShimGraph,
        "make_graphed_callables": make_graphed_callables,
        "Stream": ShimStream,
        "Event": ShimEvent,
        "stream": stream_ctx,
        "current_stream": lambda device=None: ShimStream(),
        "default_stream": lambda device=None: ShimStream(),
        "synchronize": synchooks.wrap_function(lambda device=None: None, "torch.cuda.synchronize()"),
        "graph_pool_handle": lambda: (0, 0),
        "is_current_stream_capturing": lambda: _depth[0] > 0,
    }
    # `torch.cuda.graphs.graph_pool_handle()` (mamba's update_graph_cache) reaches the module that
    # defines them: each of the replacements that module defines is replaced there too.
    graphs_module = getattr(torch.cuda, "graphs", None)
    tables: list[tuple[Any, dict[str, Any]]] = [(torch.cuda, {**_DEVICE_QUERIES, **replacements}), (torch, {"Generator": EmulatedGenerator})]
    if graphs_module is not None:
        tables.append((graphs_module, {k: v for k, v in replacements.items() if hasattr(graphs_module, k)}))
    for owner, table in tables:
        for name, value in table.items():
            _patched.set(owner, name, value)
    context_cls = DeviceContext
    original_init = context_cls.__init__

    def context_init(self: Any, device: Any) -> None:  # set_default_device("cuda"), `with torch.device("cuda")`
        original_init(self, device)
        setattr(self, EMULATED_CUDA, meant_cuda(device))

    _patched.set(context_cls, "__init__", context_init)
    mode = EmulatedCuda()
    mode.__enter__()
    _mode.append(mode)


def uninstall() -> None:
    while _mode:
        try:
            _mode.pop().__exit__(None, None, None)
        except Exception:  # noqa: BLE001 - a mode the script pushed and never popped sits above ours
            pass
    _patched.restore()
    _depth[0] = 0


