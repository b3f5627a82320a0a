"""What PyTorch itself knows about `torch.compile` regions, reported as findings at the user's lines.

A compiled function is not a raw capture (docs/compiled.md): Dynamo breaks the graph at what it
cannot trace, guards on Python values and recompiles when they change, Inductor skips CUDA graphs
for some graphs, and CUDA-graph trees record one graph per input shape and hand every replay's
outputs back in the same memory. torch says all of this in its logs; the collector listens:

- a `logging.Handler` on torch's artifact loggers `graph_breaks`, `recompiles`, `cudagraphs` and
  `perf_hints`, and on `torch._dynamo` for the recompile-limit warning. Only these loggers are
  turned on, and they stop propagating, so the script's stderr shows no more than without cglint;
- `torch.compile` is wrapped: it knows the compile site (the finding's region), and after each
  call it looks for outputs of earlier calls that this call's outputs overwrote (kept_outputs.py);
- an error that ends the script is explained when torch raised it for a compiled function (an
  overwritten output read after `cudagraph_mark_step_begin()`, a graph break under fullgraph=True).

Each event becomes a finding under the compiled-mode rule whose claim it is (rules/compiled.py):

| torch says | code |
|---|---|
| graph break on a branch on tensor data | CG203 |
| graph break on print, logging, file I/O | CG508 |
| graph break on `.item()`, `.tolist()`, a sync, a data-sized op | CG112 |
| graph break under `fullgraph=True` (the call raises) | CG911 |
| recompile: a tensor's size changed; re-recording per size | CG703 |
| recompile: an argument's Python value changed | CG604 |
| recompile: an attribute, global or other read value changed | CG603 |
| "skipping cudagraphs due to ..." | CG957 |
| an output read after a later call overwrote it | CG956 |

A graph break no rule names (`loss.backward()` in the compiled function) is a note with its line.
On the CPU (CUDA emulated) compiled functions run with Dynamo's eager backend: graph breaks and
recompiles are Dynamo's and the same on any device, but Inductor and CUDA graphs do not run (their
CPU compile path breaks under the emulation), so skips, re-recordings, pools and overwritten
outputs need a GPU; the report says so.
"""
from __future__ import annotations

import functools
import logging
import re
import sys
from contextlib import contextmanager
from types import CodeType, FrameType, FunctionType
from typing import Any, Callable, Iterator, Optional

from cglint import vocabulary
from cglint.findings import Region
from cglint.verify.findings import frames
from cglint.verify.capture.attributes import Patched
from cglint.verify.compiled.kept_outputs import OUTPUT_KEPT, OVERWRITTEN, KeptOutputs, tensors
from cglint.verify.findings.recorder import Recorder
from cglint.verify.findings.rule_codes import code_of

GRAPH_BREAK_BRANCH = code_of("tensor-branch-in-compiled-function")
GRAPH_BREAK_HOST_WORK = code_of("host-work-in-compiled-function")
GRAPH_BREAK_SYNC = code_of("sync-in-compiled-function")
GRAPH_BREAK_FULLGRAPH = code_of("graph-break-with-fullgraph")
GUARDED_VALUE = code_of("guarded-value-changes-between-calls")
CHANGING_ARGUMENT = code_of("changing-number-passed-to-compiled-function")
SHAPE_CHANGES = code_of("compiled-input-shape-changes")
CUDAGRAPHS_SKIPPED = code_of("compiled-cudagraphs-skipped")

# Graph-break reasons (torch's words, or the user's line) -> the rule that claims the construct.
# Checked in order: a branch on `.item()` is a branch; `print(t.max())` is host work.
BREAK_CODES: tuple[tuple[str, "re.Pattern[str]"], ...] = (
    (GRAPH_BREAK_BRANCH, re.compile(r"data-dependent branching|generic_jump|dynamic control flow|^\s*(if|elif|while)\b.*:", re.I | re.M)),
    (GRAPH_BREAK_HOST_WORK, re.compile(r"`print`|\bprint\(|logging|logger|\bopen\(|builtin `open`|\.write\(|tqdm|warnings\.warn", re.I)),
    (GRAPH_BREAK_SYNC, re.compile(r"\.item\(\)|Tensor\.item|tolist|\.numpy\(|\.cpu\(|synchroniz|nonzero|capture_scalar_outputs|"
                                  r"dynamic shape operator|data-dependent output|_local_scalar_dense|masked_select|unique", re.I)),
)
# A failed guard on a tensor's geometry: a new input shape.
SHAPE_GUARD = re.compile(r"size mismatch|stride mismatch|dimensionality mismatch|rank mismatch|sizes? of|\.size\(\)|numel", re.I)
# `L['lr'] == 0.0003`, `lr == 0.0003`: a guard on a local (an argument of the function).
LOCAL_GUARD = re.compile(r"^(?:\d+/\d+:\s*)?(?:L\['(?P<quoted>\w+)'\]|(?P<bare>[A-Za-z_]\w*))\s*(?:==|!=|is\b|<|>)")
_FILE_LINE = re.compile(r'File "(?P<path>[^"]+)", line (?P<line>\d+)')
_BREAK_AT = re.compile(r"in user code at (?P<path>.+?):(?P<line>\d+)\s*$", re.M)
_RECOMPILING = re.compile(r"Recompiling function (?P<name>\S+) in (?P<path>.+?):(?P<line>\d+)")
_LIMIT = re.compile(r"hit config\.(?P<limit>\w+) \((?P<value>\d+)\)\s+function: '(?P<name>[^']+)' \((?P<path>.+?):(?P<line>\d+)\)\s+last reason: (?P<reason>.*)")
_RESUME = re.compile(r"^torch_dynamo_resume_in_(?P<name>\w+?)_at_\d+$")
_ARTIFACTS = ("graph_breaks", "recompiles", "cudagraphs", "perf_hints")
_TORCH_MODULES = ("torch._dynamo.symbolic_convert", "torch._dynamo.convert_frame", "torch._dynamo.guards", "torch._dynamo.exc")
_INDUCTOR_MODULES = ("torch._inductor.cudagraph_utils", "torch._inductor.cudagraph_trees")
CPU_NOTE = (
    "torch.compile ran with Dynamo's eager backend (no GPU): graph breaks and recompilations are "
    "Dynamo's and were observed; CUDA-graph skips, re-recordings per shape, tree pool sizes and "
    "outputs overwritten by a later replay need a GPU and were not checked"
)


def break_code(reason: str, line_text: str = "") -> Optional[str]:
    """The rule that claims a graph break, from torch's reason or else the user's line. A break
    on a branch's own line is the branch (`if t.any():` first breaks on the scalar it reads)."""
    if BREAK_CODES[0][1].search(line_text) and any(p.search(reason) for c, p in BREAK_CODES if c != GRAPH_BREAK_HOST_WORK):
        return GRAPH_BREAK_BRANCH
    for text in (reason, line_text):
        for code, pattern in BREAK_CODES:
            if pattern.search(text):
                return code
    return None


def recompile_code(failure: str, arguments: tuple[str, ...]) -> str:
    """The rule that claims a recompilation, from the first failed guard."""
    if SHAPE_GUARD.search(failure):
        return SHAPE_CHANGES
    local = LOCAL_GUARD.match(failure.strip())
    name = local and (local["quoted"] or local["bare"])
    return CHANGING_ARGUMENT if name and name in arguments else GUARDED_VALUE


def _user_location(text: str) -> Optional[frames.Where]:
    """The innermost `File "...", line N` of the user's code in a message (tracebacks are outermost first)."""
    found = [m for m in _FILE_LINE.finditer(text) if frames.is_user_path(m["path"])]
    return frames.Where(found[-1]["path"], int(found[-1]["line"])) if found else None


def _head(reason: str, lines: int = 2) -> str:
    """The first lines of torch's explanation, without its preamble ("Encountered graph break when ...")."""
    kept = [line.strip() for line in reason.strip().splitlines()
            if line.strip() and not line.strip().startswith("Encountered graph break when attempting")]
    return "; ".join(kept[:lines])[:300]


class CompileEventCollector:
    """Collects what torch reports about the run's compiled functions (graph breaks, recompiles,
    CUDA-graph skips and re-recordings, kept outputs) as findings; one per instrumented run."""

    SHAPES_REPORTED = 3  # two shapes are common (a prefill and a decode step); a third means they keep changing
    MAX_SHAPES = 64

    def __init__(self, recorder: Recorder, *, gpu: bool, note: Callable[[str], None] = lambda text: None):
        self.recorder = recorder
        self.gpu = gpu
        self.note = note
        self.kept = KeptOutputs(self) if gpu else None
        self._regions: list[Region] = []  # compile sites of the compiled calls running now
        self._sites: list[frames.Where] = []  # the user lines that made those calls
        self._handler = _Handler(self)
        self._loggers: list[tuple[logging.Logger, int, bool]] = []
        self._enabled_recompiles = False
        self._parameters: dict[tuple[str, str, int], tuple[str, ...]] = {}  # compiled function -> its parameters
        self._shapes: dict[tuple[int, str, int], dict[tuple, None]] = {}  # (callable, call site) -> input shapes

    # --- torch's logs --------------------------------------------------------------
    def listen(self) -> None:
        """Turn on the loggers that carry compile events, into this collector only."""
        if self._loggers:
            return
        import importlib

        from torch._logging import _internal as torch_logging

        for module in _TORCH_MODULES + (_INDUCTOR_MODULES if self.gpu else ()):
            try:
                importlib.import_module(module)
            except Exception:  # noqa: BLE001 - an older torch without one of them: fewer events
                pass
        asked = set(torch_logging.log_state.artifact_names)  # what TORCH_LOGS asked for stays visible
        for qname in torch_logging.log_registry.get_artifact_log_qnames():
            artifact = qname.rpartition(".__")[2]
            if artifact in _ARTIFACTS:
                self._hook(logging.getLogger(qname), logging.DEBUG, propagate=artifact in asked)
        self._hook(logging.getLogger("torch._dynamo"), None, propagate=None)  # the recompile-limit warning
        if "recompiles" not in asked:  # guards only format their failures when the artifact is on
            torch_logging.log_state.enable_artifact("recompiles")
            self._enabled_recompiles = True

    def _hook(self, logger: logging.Logger, level: Optional[int], propagate: Optional[bool]) -> None:
        self._loggers.append((logger, logger.level, logger.propagate))
        if level is not None:
            logger.setLevel(level)
        if propagate is not None:
            logger.propagate = propagate
        logger.addHandler(self._handler)

    def close(self) -> None:
        for logger, level, propagate in reversed(self._loggers):
            logger.removeHandler(self._handler)
            logger.setLevel(level)
            logger.propagate = propagate
        self._loggers.clear()
        if self._enabled_recompiles:
            from torch._logging import _internal as torch_logging

            torch_logging.log_state.artifact_names.discard("recompiles")
            self._enabled_recompiles = False

    def handle(self, name: str, message: str) -> None:
        """One log record of torch (its logger's name and its formatted message)."""
        if "Graph break" in message and "in user code at" in message:
            self.graph_break(message)
        elif message.startswith("Recompiling function"):
            self.recompiled(message)
        elif "hit config." in message and "last reason" in message:
            self.recompile_limit(message)
        elif "skipping cudagraph" in message.lower():
            self.cudagraphs_skipped(message)
        elif "distinct input size" in message or "Re-recording function" in message:
            self.rerecorded(message)

    # --- events ----------------------------------------------------------------------
    def graph_break(self, message: str) -> None:
        at = _BREAK_AT.search(message.split("\n", 1)[0] + "\n")
        reason = message.split("Graph Break Reason:", 1)[-1].split("User code traceback:", 1)[0]
        where = frames.Where(at["path"], int(at["line"])) if at and frames.is_user_path(at["path"]) else None
        if where is None:  # the break is inside a library call: blame the user's line that made it
            where = _user_location(message.split("User code traceback:", 1)[-1]) if "User code traceback:" in message else None
        if where is None:
            return  # a duplicate of a break inside a library, already reported with its traceback
        code = break_code(_head(reason, 4), where.text)
        what = _head(reason)
        if code is None:
            self.note(f"graph break at {frames.display_path(where.path)}:{where.line} that no rule names: {what}")
            return
        self.observe(code, f"torch.compile broke the graph here: {what}", where, "graph break logged by Dynamo")

    def recompiled(self, message: str) -> None:
        head = _RECOMPILING.search(message)
        failures = [line.strip()[2:] for line in message.splitlines() if line.strip().startswith("- ")]
        if head is None or not failures:
            return
        self._recompile(head["name"], head["path"], int(head["line"]), failures[0], "\n".join(failures), "recompiled")

    def recompile_limit(self, message: str) -> None:
        found = _LIMIT.search(" ".join(message.split()))
        if found is None:
            return
        self._recompile(found["name"], found["path"], int(found["line"]), found["reason"], found["reason"],
                        f"hit the {found['limit']} ({found['value']}): Dynamo stopped compiling it and runs it eagerly from now on")

    def _recompile(self, name: str, path: str, first_line: int, failure: str, failures: str, event: str) -> None:
        if not frames.is_user_path(path):
            return  # a torch or cglint function recompiled (the CPU emulation's own wrappers)
        resume = _RESUME.match(name)
        function = resume["name"] if resume else name
        key = (function, path, first_line)
        arguments = () if resume else self._parameters.get(key) or _arguments(*key)
        code = recompile_code(failure, arguments)
        guard = re.sub(r"^\d+/\d+:\s*", "", failure.split("#", 1)[0].strip())
        if code == GUARDED_VALUE:  # at the line that reads the value
            where = _user_location(failures) or _line_reading(guard, path, first_line) or frames.Where(path, first_line)
        else:  # at the call that passed the new shape or number
            where = self.caller(function, path) or frames.Where(path, first_line)
        self.observe(code, f"`{function}` {event}: guard failed: {guard}", where, "recompile logged by Dynamo")

    def cudagraphs_skipped(self, message: str) -> None:
        reason = _head(message.split("Found from", 1)[0], 2)
        if "re-recording limit" in message:
            where = self.caller() or _user_location(message)
            if where is not None:
                self.observe(SHAPE_CHANGES, f"CUDA graphs given up after re-recording: {reason}", where, "logged by CUDA-graph trees")
            return
        where = _user_location(message) or self.caller()
        if where is not None:
            self.observe(CUDAGRAPHS_SKIPPED, f"Inductor skipped CUDA graphs: {reason}", where, "logged by Inductor")

    def rerecorded(self, message: str) -> None:
        where = self.caller()
        if where is None:
            return
        if "distinct input size" in message or SHAPE_GUARD.search(message):
            self.observe(SHAPE_CHANGES, f"CUDA-graph trees record a new graph for each input size: {_head(message, 2)}",
                         where, "logged by CUDA-graph trees")
        else:
            self.note(f"CUDA-graph trees re-recorded at {frames.display_path(where.path)}:{where.line}: {_head(message, 2)}")

    def script_raised(self, exc: BaseException) -> None:
        """Explain an error that ended the script when torch raised it for a compiled function."""
        text = str(exc)
        where = _raised_at(exc)
        if where is None:
            return
        if OVERWRITTEN in text:
            self.observe(OUTPUT_KEPT, "read an output of a compiled function that a later call overwrote; torch raised: "
                         + _head(text.split("Stack trace:", 1)[0], 1), where, "torch raised on the read")
        elif type(exc).__name__ in ("Unsupported", "UserError") and type(exc).__module__.startswith("torch._dynamo"):
            self.observe(GRAPH_BREAK_FULLGRAPH, f"the first call failed to compile: {_head(text)}",
                         _user_location(text) or where, "raised by Dynamo")

    # --- where -------------------------------------------------------------------------
    def observe(self, code: str, what: str, where: frames.Where, evidence: str) -> None:
        full = frames.Where(where.path, where.line, 1, where.line, 0, where.function)
        observation = self.recorder.observe_at(code, what, full, (full.label(),), evidence=evidence)
        if observation.region is None and self._regions:
            observation.region = self._regions[-1]  # the compile site of the call running now

    def caller(self, function: Optional[str] = None, path: Optional[str] = None) -> Optional[frames.Where]:
        """The line that called the compiled function running now (else the innermost user line
        on the stack outside the function itself)."""
        if self._sites:
            return self._sites[-1]
        frame: Optional[FrameType] = sys._getframe(1)
        while frame is not None:
            code = frame.f_code
            if frames.is_user_code(code) and not (function and code.co_filename == path and
                                                  _base_name(code.co_name) == function):
                return frames.where(frame)
            frame = frame.f_back
        return None

    @contextmanager
    def calling(self, region: Optional[Region], site: Optional[FrameType]) -> Iterator[None]:
        if region is not None:
            self._regions.append(region)
        if site is not None:
            self._sites.append(frames.where(site))
        try:
            yield
        finally:
            if region is not None:
                self._regions.pop()
            if site is not None:
                self._sites.pop()

    def called_with(self, compiled: Any, args: Any, caller: Optional[FrameType]) -> None:
        """Count the input shapes a call site gives a compiled function: each new one is a new
        compilation or, under CUDA graphs, a new recording (CG703 once a third one comes)."""
        if caller is None:
            return
        shapes = tuple(tuple(t.shape) for t in tensors(args))
        key = (id(compiled), caller.f_code.co_filename, caller.f_lineno)
        seen = self._shapes.setdefault(key, {})
        if shapes in seen or len(seen) >= self.MAX_SHAPES:
            return
        seen[shapes] = None
        if len(seen) >= self.SHAPES_REPORTED:
            shown = ", ".join(" ".join(str(list(s)) for s in sig) for sig in list(seen)[:4])
            self.observe(SHAPE_CHANGES, f"this call gave the compiled function {len(seen)} different input shapes "
                         f"({shown}{', ...' if len(seen) > 4 else ''}); each new shape is compiled or recorded again",
                         frames.where(caller), "input shapes seen by cglint at each call")

    # --- torch.compile ---------------------------------------------------------------
    def wrap_compile(self, original: Callable[..., Any]) -> Callable[..., Any]:
        collector = self

        @functools.wraps(original)
        def compile(model: Any = None, *args: Any, **kwargs: Any) -> Any:
            if model is None:  # `@torch.compile(mode=...)`: a decorator
                return lambda fn: compile(fn, *args, **kwargs)
            caller = frames.current_user_frame(2)
            where = frames.where(caller) if caller else None
            region = Region(frames.display_path(where.path), where.line, vocabulary.capture_kind("compiled")) if where else None
            if not collector.gpu:
                kwargs = _eager_backend(kwargs)
                collector.note(CPU_NOTE)
            collector.listen()
            code = getattr(getattr(getattr(model, "forward", model), "__func__", getattr(model, "forward", model)), "__code__", None)
            if isinstance(code, CodeType):
                collector._parameters[(code.co_name, code.co_filename, code.co_firstlineno)] = _parameter_names(code)
            return collector.wrap(original(model, *args, **kwargs), region)
        return compile

    def wrap(self, compiled: Any, region: Optional[Region]) -> Any:
        """The compiled callable, with its calls watched. A compiled module keeps its type: its
        `forward` (Dynamo's, an attribute of the OptimizedModule) is the one wrapped."""
        import torch

        if isinstance(compiled, torch.nn.Module) and "forward" in vars(compiled):
            compiled.forward = self.wrap(compiled.forward, region)
            return compiled

        @functools.wraps(compiled)
        def call(*args: Any, **kwargs: Any) -> Any:
            if torch.compiler.is_compiling():  # called from another compiled function: Dynamo inlines it
                return compiled(*args, **kwargs)
            site = frames.current_user_frame(1)
            self.called_with(compiled, (args, kwargs), site)
            with self.calling(region, site):
                out = compiled(*args, **kwargs)
            if self.kept is not None:
                try:
                    self.kept.returned(out, (args, kwargs))
                except Exception as exc:  # noqa: BLE001 - cglint's own failure must not end the user's script
                    self.note(f"the check for kept outputs failed ({type(exc).__name__}: {exc}); it was not done")
            return out
        return call


class _Handler(logging.Handler):
    def __init__(self, collector: CompileEventCollector):
        super().__init__(logging.DEBUG)
        self.collector = collector

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.collector.handle(record.name, record.getMessage())
        except Exception:  # noqa: BLE001 - a message in a new format must never break the user's compile
            pass


# --- helpers: the compiled function's code and the script's error ----------------------------

def _parameter_names(code: CodeType) -> tuple[str, ...]:
    return code.co_varnames[:code.co_argcount + code.co_kwonlyargcount]


def _arguments(function: str, path: str, first_line: int) -> tuple[str, ...]:
    """The parameters of a function Dynamo compiled that was not passed to torch.compile (one it
    reached through a graph break), from its live code object, found by location. Rare: once per
    recompile of such a function."""
    import gc

    for obj in gc.get_objects():
        if type(obj) is not FunctionType:  # only plain functions: other objects may compute attributes
            continue
        code = obj.__code__
        if (code.co_name, code.co_filename, code.co_firstlineno) == (function, path, first_line):
            return _parameter_names(code)
    return ()


def _line_reading(guard: str, path: str, first_line: int) -> Optional[frames.Where]:
    """The first line of the function that names the guarded attribute or global (`L['self'].steps` -> `.steps`)."""
    import linecache

    names = re.findall(r"\.(\w+)|G\['(\w+)'\]", guard)
    wanted = [a or b for a, b in names]
    if not wanted:
        return None
    last = wanted[-1]
    lines = linecache.getlines(path)
    indent = None
    for number in range(first_line, len(lines) + 1):
        text = lines[number - 1]
        if number > first_line and text.strip():
            depth = len(text) - len(text.lstrip())
            if indent is None:
                indent = depth
            elif depth < indent and not text.lstrip().startswith((")", "]", "}")):
                break
        if re.search(rf"\b{re.escape(last)}\b", text) and number > first_line:
            return frames.Where(path, number)
    return None


def _base_name(name: str) -> str:
    resume = _RESUME.match(name)
    return resume["name"] if resume else name


def _raised_at(exc: BaseException) -> Optional[frames.Where]:
    """The innermost user line in the traceback of an error."""
    found = None
    tb = exc.__traceback__
    while tb is not None:
        if frames.is_user_code(tb.tb_frame.f_code):
            found = frames.where(tb.tb_frame, tb.tb_lasti, tb.tb_lineno)
        tb = tb.tb_next
    return found


def _eager_backend(kwargs: dict[str, Any]) -> dict[str, Any]:
    """CPU mode: Dynamo alone (its graph breaks and guards), without Inductor or CUDA graphs."""
    kept = {k: v for k, v in kwargs.items() if k not in ("mode", "options", "backend")}
    return {**kept, "backend": "eager"}


# --- the run's collector ------------------------------------------------------------------------

_active: Optional[CompileEventCollector] = None
_patched = Patched()


def install(session: Any) -> CompileEventCollector:
    """Collect compile events for a whole run (`cglint verify SCRIPT`, `pytest --cglint-verify`)."""
    global _active
    import torch

    if _active is not None:
        return _active
    frames.refresh()  # torch is imported now: its files are library, not the user's
    recorder = Recorder(phase="torch.compile")
    session.recorders.append(recorder)
    _active = CompileEventCollector(recorder, gpu=session.gpu, note=session.note)
    _patched.set(torch, "compile", _active.wrap_compile(torch.compile))
    return _active


def uninstall() -> None:
    global _active
    _patched.restore()
    if _active is not None:
        _active.close()
        _active = None


def script_raised(exc: BaseException) -> None:
    if _active is not None:
        _active.script_raised(exc)
