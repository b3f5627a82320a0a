"""stream: streams used in captured code without joining the capture.

A capture records the capturing stream, and other streams only once they wait on
it (fork) while it is capturing; the capturing stream must wait on them again
(join) before the capture ends. Work sent to a stream outside that fork and join
is not recorded or invalidates the capture.
"""
from __future__ import annotations

from typing import Optional

import libcst as cst

from cglint import vocabulary
from cglint.engine.captures import capture_method
from cglint.engine.syntax import code_of, descendants, is_true, keyword, positional
from cglint.rule import CAPTURE, Hit, Rule


def _stream_context(with_node: cst.With, ctx) -> Optional[cst.BaseExpression]:
    """`s` in `with torch.cuda.stream(s):`."""
    for item in with_node.items:
        call = item.item
        if isinstance(call, cst.Call) and ctx.call_name(call) in vocabulary.names("streams.context"):
            args = positional(call)
            return keyword(call, "stream") or (args[0] if args else None)
    return None


def _calls(statements) -> list[cst.Call]:
    return [n for stmt in statements for n in [stmt, *descendants(stmt)] if isinstance(n, cst.Call)]


def _no_fork_needed(stream: cst.BaseExpression, ctx) -> bool:
    """The capturing stream itself, the current stream, None, a stream handed in by the
    caller (whose fork and join the caller owns), or the legacy stream (CG803)."""
    if isinstance(stream, cst.Name) and stream.value == "None":
        return True
    if _is_current(stream, ctx) or isinstance(stream, cst.Call) and ctx.call_name(stream) in vocabulary.names("streams.legacy"):
        return True
    if isinstance(stream, cst.Name) and stream.value in {p.name.value for p in ctx.function.params}:
        return True
    capture = ctx.capture
    marker = capture.marker if capture is not None else None
    if isinstance(marker, cst.With):
        for item in marker.items:
            given = keyword(item.item, "stream") if isinstance(item.item, cst.Call) else None
            if given is not None and code_of(given) == code_of(stream):
                return True
    return False


def _is_current(stream: cst.BaseExpression, ctx) -> bool:
    """`torch.cuda.current_stream()`: the capturing stream itself."""
    return isinstance(stream, cst.Call) and ctx.call_name(stream) in vocabulary.names("streams.current")


def _forked(stream: str, statements) -> bool:
    """`s.wait_stream(...)` / `s.wait_event(...)`, or a helper given `s` (`fork(s)`)."""
    for call in _calls(statements):
        func = call.func
        if isinstance(func, cst.Attribute) and func.attr.value in vocabulary.names("streams.waits") and code_of(func.value) == stream:
            return True
        if _helper_given(call, stream):
            return True
    return False


def _joined(stream: str, statements) -> bool:
    """`cur.wait_stream(s)`, a `wait_event` on an event recorded on `s`, or a helper given `s`."""
    for call in _calls(statements):
        func = call.func
        if isinstance(func, cst.Attribute) and func.attr.value == "wait_stream" and any(code_of(a.value) == stream for a in call.args):
            return True
        if isinstance(func, cst.Attribute) and func.attr.value == "wait_event":
            return True
        if _helper_given(call, stream):
            return True
    return False


def _helper_given(call: cst.Call, stream: str) -> bool:
    func = call.func
    if isinstance(func, cst.Attribute) and func.attr.value in vocabulary.names("streams.stream_calls"):
        return False
    return any(code_of(a.value) == stream for a in call.args)


class SideStreamNotForked(Rule):
    code = "CG801"
    name = "side-stream-not-forked"
    category = "stream"
    severity = "error"
    summary = "Runs work on a side stream in captured code (`with torch.cuda.stream(s):`) without `s.wait_stream(<capturing stream>)` first."
    message = "`{stream}` is used in captured code without first waiting on the capturing stream; its work is not part of the capture, and joining it back fails capture (cudaErrorStreamCaptureIsolation)"
    fix_hint = "Fork first: `s.wait_stream(torch.cuda.current_stream())` before `with torch.cuda.stream(s):`, and join after: `torch.cuda.current_stream().wait_stream(s)`."
    why = """Only streams that wait on the capturing stream during capture join the capture.
    Work sent to another stream runs right away (on inputs not yet computed) and is
    missing from the graph; when the capturing stream then waits on that stream, CUDA
    refuses a dependency on uncaptured work (error 905) and the capture fails."""
    nodes = (cst.With,)
    invalid = (
        '''
import torch

side = torch.cuda.Stream()
with torch.cuda.graph(g):
    with torch.cuda.stream(side):  # expect: CG801
        static_aux = aux_head(static_x)
    static_out = model(static_x)
    torch.cuda.current_stream().wait_stream(side)
''',
    )
    valid = (
        '''
import torch

side = torch.cuda.Stream()
with torch.cuda.graph(g):
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        static_aux = aux_head(static_x)
    static_out = model(static_x)
    torch.cuda.current_stream().wait_stream(side)
''',
    )

    def check(self, node, ctx):
        found = _side_stream_block(node, ctx)
        if found is None or found[1]:
            return
        text = found[0]
        if ctx.in_capture_block or _made_here(text, ctx.before(node)) or _callers_never_fork(text, ctx):
            yield Hit(node, {"stream": text})


def _side_stream_block(node: cst.With, ctx) -> Optional[tuple[str, bool]]:
    """(the stream, whether it was forked from the capturing stream) for a
    `with torch.cuda.stream(s):` block in captured code that needs a fork at all."""
    stream = _stream_context(node, ctx)
    if stream is None or _no_fork_needed(stream, ctx) or _holds_capture(node):
        return None
    text = code_of(stream)
    return text, _forked(text, ctx.before(node)) or _forked(text, node.body.body[:1])


def _holds_capture(with_node: cst.With) -> bool:
    """`with torch.cuda.stream(s): g.capture_begin() ...`: the stream of a capture of its own."""
    return any(isinstance(n, cst.Call) and capture_method(n) == "begin" for n in descendants(with_node.body))


def _made_here(stream: str, statements) -> bool:
    """`s = torch.cuda.Stream()` in this function: no caller can have forked it."""
    for stmt in statements:
        for node in [stmt, *descendants(stmt)]:
            if isinstance(node, cst.Assign) and any(code_of(t.target) == stream for t in node.targets):
                return True
    return False


def _callers_never_fork(stream: str, ctx) -> bool:
    """In a called function the fork may precede the call: report only when every known
    caller is seen not to fork before calling (unknown callers: not reported)."""
    callers = ctx.callers()
    return bool(callers) and not any(_forked(stream, ctx.before(call, caller)) for caller, call in callers)


class SideStreamNotJoined(Rule):
    code = "CG802"
    name = "side-stream-not-joined"
    category = "stream"
    severity = "error"
    summary = "Forks a side stream in captured code but never makes the capturing stream wait on it before the capture ends."
    message = "work on `{stream}` is forked from the capture but never joined back; capture_end() fails with cudaErrorStreamCaptureUnjoined (`capturing stream has unjoined work`)"
    fix_hint = "Join before the capture ends: `torch.cuda.current_stream().wait_stream({stream})` after the `with torch.cuda.stream({stream}):` block."
    why = """A forked stream becomes part of the capture. CUDA ends a capture only when every
    forked stream has been joined back into the capturing stream; otherwise
    cudaStreamEndCapture returns error 904 and no graph is made."""
    nodes = (cst.With,)
    invalid = (
        '''
import torch

side = torch.cuda.Stream()
with torch.cuda.graph(g):
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # expect: CG802
        static_aux = aux_head(static_x)
    static_out = model(static_x)
''',
        '''
import torch

def ring_attention(q, kv, cp_stream, steps):
    streams = [torch.cuda.current_stream(), cp_stream]
    out = torch.zeros_like(q)
    for i in range(1, steps):
        streams[i % 2].wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(streams[i % 2]):  # expect: CG802
            out += q @ kv
    return out

side = torch.cuda.Stream()
with torch.cuda.graph(g):
    static_out = ring_attention(static_q, static_kv, side, 4)
''',
    )
    valid = (
        '''
import torch

side = torch.cuda.Stream()
with torch.cuda.graph(g):
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        static_aux = aux_head(static_x)
    static_out = model(static_x)
    torch.cuda.current_stream().wait_stream(side)
''',
        '''
import torch

def ring_attention(q, kv, cp_stream, steps):
    # Transformer Engine's context-parallel ring: entry 0 is the capturing stream itself,
    # entry 1 is joined by its index after the loop.
    streams = [torch.cuda.current_stream(), cp_stream]
    out = torch.zeros_like(q)
    for i in range(1, steps):
        streams[i % 2].wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(streams[i % 2]):
            out += q @ kv
    torch.cuda.current_stream().wait_stream(streams[1])
    return out

side = torch.cuda.Stream()
with torch.cuda.graph(g):
    static_out = ring_attention(static_q, static_kv, side, 4)
''',
    )

    def check(self, node, ctx):
        found = _side_stream_block(node, ctx)
        if found is None or not found[1]:
            return
        after = ctx.after(node)
        if _joined(found[0], after):
            return
        elements = _stream_list_elements(_stream_context(node, ctx), ctx.before(node))
        if elements and all(_is_current(element, ctx) or any(_joined(name, after) for name in names)
                            for element, names in elements):
            return  # every stream the index can pick is the capturing one or joined by its own name
        yield Hit(node, {"stream": found[0]})


def _stream_list_elements(stream: Optional[cst.BaseExpression], statements) -> list[tuple[cst.BaseExpression, tuple[str, ...]]]:
    """For `streams[(i - 1) % 2]`, an index into a list this function builds
    (`streams = [torch.cuda.current_stream(), cp_stream]`), each element with the names it is
    joined by (`cp_stream`, `streams[1]`); empty where the stream is no such entry."""
    if not (isinstance(stream, cst.Subscript) and isinstance(stream.value, cst.Name)):
        return []
    name = stream.value.value
    built = None
    for statement in statements:
        for node in [statement, *descendants(statement)]:
            if isinstance(node, cst.Assign) and any(isinstance(t.target, cst.Name) and t.target.value == name for t in node.targets):
                built = node.value  # the last binding before the block
    if not isinstance(built, (cst.List, cst.Tuple)) or any(isinstance(e, cst.StarredElement) for e in built.elements):
        return []
    return [(e.value, (code_of(e.value), f"{name}[{i}]")) for i, e in enumerate(built.elements)]


class LegacyStreamInCapture(Rule):
    code = "CG803"
    name = "default-stream-in-capture"
    category = "stream"
    severity = "warning"
    summary = "Uses the default (legacy) stream in captured code: `torch.cuda.default_stream()`."
    message = "`{expr}` sends work to the default stream while another stream captures; that work is not recorded in the graph"
    fix_hint = "Use `torch.cuda.current_stream()` (the capturing stream) in captured code."
    why = """The capturing stream is a side stream, and PyTorch's side streams do not
    synchronize with the legacy default stream. Kernels sent to the default stream
    during capture run once, right away, on inputs that are not computed yet, and are
    missing from the graph: replays silently skip them."""
    nodes = (cst.Call,)
    invalid = (
        '''
import torch

def scatter_add(out, src):
    with torch.cuda.stream(torch.cuda.default_stream()):  # expect: CG803
        out.add_(src)

with torch.cuda.graph(g):
    scatter_add(static_out, static_src)
''',
    )
    valid = (
        '''
import torch

def scatter_add(out, src):
    out.add_(src)

with torch.cuda.graph(g):
    scatter_add(static_out, static_src)
''',
    )

    def check(self, node, ctx):
        if ctx.call_name(node) in vocabulary.names("streams.legacy"):
            yield node


def _on_side_stream(node: cst.CSTNode, function, ctx) -> bool:
    """Inside `with torch.cuda.stream(...)`, or after `torch.cuda.set_stream(...)`, in `function`."""
    for outer in ctx.enclosing(node, function):
        if isinstance(outer, cst.With) and _stream_context(outer, ctx) is not None:
            return True
    before = _calls(ctx.before(node, function))
    if any(ctx.call_name(c) in vocabulary.names("streams.set_stream") for c in before):
        return True
    # A context entered by hand (`self.stream_ctx.__enter__()`, as torch.cuda.graph does) may
    # be a stream: the checker cannot tell, so it does not claim the default stream.
    return any(isinstance(c.func, cst.Attribute) and c.func.attr.value == "__enter__" for c in before)


class CaptureOnDefaultStream(Rule):
    code = "CG804"
    name = "capture-begin-on-default-stream"
    category = "stream"
    severity = "error"
    summary = "Calls `CUDAGraph.capture_begin()` on the default stream (no `with torch.cuda.stream(side):` around it or around its callers)."
    message = "`{expr}` begins a capture on the default stream, which PyTorch refuses (`CUDA graphs must be captured on a non-default stream`)"
    fix_hint = "Capture on a side stream: `with torch.cuda.stream(side): g.capture_begin() ... g.capture_end()`, or use `with torch.cuda.graph(g):`, which picks one itself."
    why = """CUDA cannot capture the legacy default stream, so PyTorch checks that the current
    stream is not the default one when a raw capture begins. `torch.cuda.graph` switches
    to its own side stream; `capture_begin()` uses whatever stream is current."""
    scope = CAPTURE
    nodes = (cst.Call,)
    invalid = (
        '''
import torch

def capture(model, static_x):
    g = torch.cuda.CUDAGraph()
    g.capture_begin()  # expect: CG804
    static_y = model(static_x)
    g.capture_end()
    return g, static_y

graph, out = capture(model, static_x)
''',
    )
    valid = (
        '''
import torch

def capture(model, static_x):
    g = torch.cuda.CUDAGraph()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        g.capture_begin()
        static_y = model(static_x)
        g.capture_end()
    torch.cuda.current_stream().wait_stream(side)
    return g, static_y

graph, out = capture(model, static_x)
''',
    )

    def check(self, node, ctx):
        if capture_method(node) != "begin" or _on_side_stream(node, ctx.function, ctx):
            return
        if ctx.function.qualname != "<module>":
            callers = ctx.callers()
            # Callers we cannot see may switch streams: only report when every caller is known not to.
            if not callers or any(_on_side_stream(call, caller, ctx) for caller, call in callers):
                return
            # A caller that is itself called from where the checker cannot see (an API's
            # `__enter__`, a library wrapper) runs on its own callers' stream: unknown.
            if any(caller.qualname != "<module>" and not ctx.callers(caller) for caller, _ in callers):
                return
        yield node


class TimingEventInCapture(Rule):
    code = "CG805"
    name = "timing-event-created-in-capture"
    category = "stream"
    severity = "warning"
    summary = "Creates a timing CUDA event (`torch.cuda.Event(enable_timing=True)`) inside captured code."
    message = "`{expr}` creates a timing event while capturing; it is made once, at capture, and the times read from it describe the capture, not the replays"
    fix_hint = "Create timing events once, outside the graph, and record them around replay()."
    why = """Events recorded during capture become event nodes of the graph; a timing event
    created there exists once, from capture time, and code that reads elapsed times from
    it after replays measures nothing it meant to. Events without timing, created to
    fork and join streams inside the capture, are legal and not reported, and neither is
    a creation guarded by a lazy-initialisation check (`if self.event is None:`)."""
    nodes = (cst.Call,)
    invalid = (
        '''
import torch

def forward(model, x):
    start = torch.cuda.Event(enable_timing=True)  # expect: CG805
    start.record()
    return model(x)

with torch.cuda.graph(g):
    static_out = forward(model, static_x)
''',
    )
    valid = (
        '''
import torch

def forward(model, x):
    return model(x)

with torch.cuda.graph(g):
    static_out = forward(model, static_x)
start = torch.cuda.Event(enable_timing=True)
end = torch.cuda.Event(enable_timing=True)
start.record()
g.replay()
end.record()
''',
    )

    def check(self, node, ctx):
        if ctx.call_name(node) in vocabulary.names("streams.events") and is_true(keyword(node, "enable_timing")):
            if not any(isinstance(s, cst.If) and _lazy_guard(s.test) for s in ctx.enclosing(node)):
                yield node


def _lazy_guard(test: cst.BaseExpression) -> bool:
    """`if self.event is None:`, `if not hasattr(self, "event"):`: created on the first (warmup) call only."""
    text = code_of(test, limit=200)
    return " is None" in text or "hasattr(" in text or text.startswith("not self.")


class SetStreamInCapture(Rule):
    code = "CG806"
    name = "set-stream-in-capture"
    category = "stream"
    severity = "error"
    summary = "Switches the current stream with `torch.cuda.set_stream()` inside captured code."
    message = "`{expr}` switches the current stream during capture; work after it leaves the capture, and the capture ends on another stream than it began (PyTorch refuses: `Capture must end on the same stream it began on`)"
    fix_hint = "Use a `with torch.cuda.stream(s):` block forked from and joined back to the capturing stream."
    why = """`set_stream` changes the current stream with no fork or join and no restore.
    Kernels after it go to a stream that is not capturing, and when the capture ends
    the current stream is no longer the capturing one, which PyTorch rejects."""
    nodes = (cst.Call,)
    invalid = (
        '''
import torch

side = torch.cuda.Stream()
with torch.cuda.graph(g):
    torch.cuda.set_stream(side)  # expect: CG806
    static_out = model(static_x)
''',
    )
    valid = (
        '''
import torch

side = torch.cuda.Stream()
torch.cuda.set_stream(side)
with torch.cuda.graph(g):
    static_out = model(static_x)
''',
        '''
import torch

def on_side_stream(model, x):
    previous = torch.cuda.current_stream()
    side = torch.cuda.Stream()
    side.wait_stream(previous)  # forked from the capturing stream: still captured
    torch.cuda.set_stream(side)
    out = model(x)
    previous.wait_stream(side)
    torch.cuda.set_stream(previous)  # back to the stream the capture began on
    return out

with torch.cuda.graph(g):
    static_out = on_side_stream(model, static_x)
''',
    )

    def check(self, node, ctx):
        if ctx.call_name(node) in vocabulary.names("streams.set_stream") and not _switch_kept_in_capture(node, ctx):
            yield node


def _switch_kept_in_capture(call: cst.Call, ctx) -> bool:
    """NeMo's conditional-node helper: `set_stream(body)` to a stream that begins its own
    capture into a child graph (`cudaStreamBeginCaptureToGraph(body.cuda_stream, ...)`) or
    was forked from the capturing stream (`body.wait_stream(...)`), and `set_stream(previous)`
    back to the stream saved with `current_stream()`: neither leaves the capture."""
    args = positional(call)
    if not args or not isinstance(args[0], cst.Name):
        return False
    name = args[0].value
    for node in descendants(ctx.function.node):
        if isinstance(node, cst.Assign) and isinstance(node.value, cst.Call) and (ctx.call_name(node.value) or "").endswith("current_stream"):
            if any(isinstance(t.target, cst.Name) and t.target.value == name for t in node.targets):
                return True  # restoring the stream the code ran on
        elif isinstance(node, cst.Call) and node is not call:
            callee = code_of(node.func, limit=200)
            if callee == f"{name}.wait_stream" or ("BeginCapture" in callee and name in code_of(node, limit=400)):
                return True
    return False
