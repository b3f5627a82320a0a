"""The calls the region walk followed, as a graph, so that each capture's reach is every
function it can run however the walk was shared.

The walk runs a function once per set of argument values whichever capture reached it
first, so its callees are found once; a second capture that reaches the same function
reaches them too. Nodes are a function's key, or a capture block's marker for the part of
a function that a `with torch.cuda.graph()` block or a capture_begin() span captures.
"""
from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING, Hashable

if TYPE_CHECKING:
    import libcst as cst

    from cglint.engine.captures import Capture, TraceStep
    from cglint.engine.definitions import FunctionInfo, ModuleInfo


class ReachGraph:
    def __init__(self) -> None:
        self._edges: dict[Hashable, dict[Hashable, tuple["FunctionInfo", "TraceStep"]]] = {}
        self._unfollowed: dict[Hashable, dict[int, tuple["ModuleInfo", "cst.Call", str]]] = {}

    def call(self, caller: Hashable, callee: "FunctionInfo", step: "TraceStep") -> None:
        self._edges.setdefault(caller, {}).setdefault(callee.key, (callee, step))


    def unfollowed(self, caller: Hashable, module: "ModuleInfo", call: "cst.Call", why: str) -> None:
        self._unfollowed.setdefault(caller, {}).setdefault(id(call), (module, call, why))

    def reach(self, capture: "Capture") -> tuple[dict, dict]:
        """({function key: (function, shortest trace)}, {id(call): (module, call, why)}) of a capture."""
        roots: list[tuple[Hashable, tuple]] = [(t.key, (capture.site,)) for t in capture.targets]
        if capture.marker is not None:
            roots.append((marker_node(capture.marker), (capture.site,)))
        reached: dict = {t.key: (t, (capture.site,)) for t in capture.targets}
        unfollowed: dict = {}
        queue = deque(roots)
        seen = {node for node, _ in roots}
        while queue:
            node, trace = queue.popleft()
            unfollowed.update(self._unfollowed.get(node, {}))
            for key, (callee, step) in self._edges.get(node, {}).items():
                if key not in seen:
                    seen.add(key)
                    reached[key] = (callee, trace + (step,))
                    queue.append((key, trace + (step,)))
        return reached, unfollowed


def marker_node(marker: "cst.CSTNode") -> Hashable:
    return ("marker", id(marker))
