"""CPU trace mode for scripts: stand-ins for the torch.cuda API a capturing script calls.

With no CUDA, torch.cuda.graph, CUDAGraph and streams cannot even be constructed. The
stand-ins let a script that picks its device at run time go through its capture code on
the CPU: the body of every "capture" runs once under the same instrumentation as a real
capture, replay() does nothing, and streams, events and synchronize are no-ops that still
record CG104 inside a region.
"""
from __future__ import annotations

import contextlib
from typing import Any, Optional

import torch

from cglint.findings import Region
from cglint.verify import frames, guards, synchooks
from cglint.verify.instrument import Instrumentation
from cglint.verify.recorder import Recorder
from cglint.verify.session import GraphInfo, Session

_saved: list[tuple[Any, str, Any]] = []
_depth = [0]  # regions being traced (is_current_stream_capturing answers from it)


def _start(session: Session, kind: str, graph: Any = None) -> Instrumentation:
    site = frames.current_user_frame(3)
    where = frames.where(site) if site else None
    region = Region(frames.display_path(where.path), where.line, kind) if where else None
    recorder = Recorder(region, stop=site, phase="CPU trace")
    session.recorders.append(recorder)
    session.graphs.append(GraphInfo(f"{region.path}:{region.line} ({kind})" if region else "?", kind, True, 0.0))
    _depth[0] += 1
    owned = tuple(getattr(graph, "generators", ()))
    return Instrumentation(recorder, gpu=False, owned_generators=owned, guard_reads=True).start()


def _stop(inst: Optional[Instrumentation]) -> None:
    if inst is not None and inst.running:
        inst.stop()
        _depth[0] -= 1


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


def install(session: Session) -> None:
    if _saved:
        return

    class ShimGraph:
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            self._inst: Optional[Instrumentation] = None
            self.generators: list[Any] = []  # registered: they advance on every replay

        def register_generator_state(self, generator: Any) -> None:
            self.generators.append(generator)

        def capture_begin(self, *args: Any, **kwargs: Any) -> None:
            self._inst = _start(session, "capture_begin", self)
            session.open[id(self)] = lambda exc: _stop(self._inst)

        def capture_end(self) -> None:
            session.open.pop(id(self), None)
            _stop(self._inst)

        def replay(self) -> None:
            session.note("replay() did nothing: graphs are not replayed in CPU trace mode")
            guards.check_replay(self._inst, session)

        def reset(self) -> None: ...
        def pool(self) -> tuple:
            return (0, 0)

    class ShimGraphContext:
        def __init__(self, cuda_graph: Any = None, pool: Any = None, stream: Any = None, **kwargs: Any) -> None:
            self._inst: Optional[Instrumentation] = None
            self.cuda_graph = cuda_graph

        def __enter__(self) -> None:
            self._inst = _start(session, "torch.cuda.graph", self.cuda_graph)
            if self.cuda_graph is not None:
                self.cuda_graph._inst = self._inst  # its replay() checks this capture's guards

        def __exit__(self, *exc: object) -> bool:
            _stop(self._inst)
            return False

    def make_graphed_callables(callables: Any, sample_args: Any, *args: Any, **kwargs: Any) -> Any:
        single = not isinstance(callables, tuple)
        fns, samples = ((callables,), (sample_args,)) if single else (callables, sample_args)
        graphed = []
        for fn, sample in zip(fns, samples):
            inst = _start(session, "make_graphed_callables")
            try:
                fn(*sample)
            finally:
                _stop(inst)
            graphed.append(guards.graphed(fn, inst, session))
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
    for name, value in replacements.items():
        _saved.append((torch.cuda, name, getattr(torch.cuda, name, None)))
        setattr(torch.cuda, name, value)


def uninstall() -> None:
    while _saved:
        owner, name, original = _saved.pop()
        setattr(owner, name, original)
    _depth[0] = 0


