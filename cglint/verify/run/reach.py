"""`cglint verify --save-reach FILE`: the project functions that really ran during each capture.

The static checker says which functions a capture reaches (`cglint reach --format json`); this
records which ones ran, in the same shape, so the two can be compared:

    {"version": ..., "captures": [{"path", "line", "kind",
                                   "reached": [{"path", "qualname", "line", "via"}], "unresolved": []}]}

In the script's process (script.py), an instrumented capture opens a window (Instrumentation.start
and stop): while it is open, a hook on the capturing thread sees every function that starts.
On Python 3.12+ that is a sys.monitoring tool with PY_START only, which turns itself off for  # type: ignore[attr-defined]  # 3.12+, used when sysmon.AVAILABLE
each code object outside the project the first time it fires there; elsewhere (or when no tool
id is free) a global trace function (called only as a frame starts, not for every builtin call
as a profile function is) chained with the one already set (the guard collector's), and
registered with torchmodes.own_hooks so that torch's own calls run without it, as they run
without the collector. A project function seen for the first time, or by a shorter chain of
project frames than before, is written to the event stream at once, so a run that ends by
os._exit, a crash or a kill keeps what it saw; the supervising process collects those events
and writes the file. Without --save-reach nothing here runs: `begin` returns at its first test.
"""
from __future__ import annotations

import json
import os
import sys
import sysconfig
import tempfile
import threading
from inspect import CO_OPTIMIZED
from types import CodeType, FrameType
from typing import TYPE_CHECKING, Any, Callable, Optional

from cglint.verify.capture import sysmon
from cglint.verify.findings import frames

if TYPE_CHECKING:
    from cglint.verify.run.captures import CaptureRecord
    from cglint.verify.run.events import Writer
    from cglint.verify.capture.instrument import Instrumentation

EVENT = "reach"  # the kind of the event-stream lines written here
ENV = "CGLINT_VERIFY_REACH"  # how the supervisor tells the script's process the project's roots
# Phases of a recorder that is a capture (a real one, or one traced on the CPU with CUDA emulated).
_CAPTURE_PHASES = ("capture", "CPU trace")
# Code objects of comprehensions: part of the function they are written in, never reached on their own.
_COMPREHENSIONS = frozenset({"<listcomp>", "<dictcomp>", "<setcomp>", "<genexpr>"})
_THIRD_PARTY = tuple(f"{os.sep}{name}{os.sep}" for name in ("site-packages", "dist-packages"))
Step = tuple[str, int, str]  # (absolute path, line, qualname) of one frame of a chain


def qualname(code: CodeType) -> str:
    return getattr(code, "co_qualname", code.co_name)  # co_qualname: Python 3.11+


def _folder(path: str) -> str:
    return os.path.abspath(path).rstrip(os.sep) + os.sep


class Project:
    """Which files are the project's: those under the roots, less the trees that never are (the
    standard library, site-packages and dist-packages, torch and the other library packages, cglint
    itself) unless the root itself lies inside such a tree (a `--reach-root` at an installed package)."""

    def __init__(self, roots: list[str]) -> None:
        self.roots = tuple(_folder(root) for root in roots)
        packages, stdlib = frames._library_roots()
        self.cglint = tuple(_folder(p) for p in _cglint_trees())
        self.excluded = tuple({*packages, *stdlib, *(_folder(p) for p in sysconfig.get_paths().values() if p
                                                       and os.path.basename(p.rstrip(os.sep)) in ("site-packages",
                                                                                                   "dist-packages"))})
        self._files: dict[str, Optional[str]] = {}

    def path_of(self, filename: str) -> Optional[str]:
        """The absolute path of `filename` when it is a project file, else None."""
        known = self._files.get(filename, False)
        if known is not False:
            return known  # type: ignore[return-value]
        found = self._files[filename] = self._judge(filename)
        return found

    def _judge(self, filename: str) -> Optional[str]:
        if not filename or filename.startswith("<"):
            return None  # generated code, exec'd strings, the interpreter's frozen modules
        path = os.path.abspath(filename)
        if path.startswith(self.cglint):
            return None
        for root in self.roots:
            if not path.startswith(root):
                continue
            below = path[len(root) - 1:]
            if any(marker in below for marker in _THIRD_PARTY):
                continue
            if any(path.startswith(tree) and not root.startswith(tree) for tree in self.excluded):
                continue
            return path
        return None


def _cglint_trees() -> list[str]:
    # The package is the folder two above this module's, cglint/verify/run (importing `cglint`
    # here would close an import cycle through the package's lazy `verify`).
    trees = [os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))]
    try:
        import importlib.util

        spec = importlib.util.find_spec("cglint.rules")  # the catalogue: a folder beside the package in a checkout
        if spec is not None and spec.origin:
            trees.append(os.path.dirname(os.path.abspath(spec.origin)))
    except (ImportError, ValueError):
        pass
    return trees


class Run:
    """What one supervised script run records: the project, and the best chain sent per function and site."""

    def __init__(self, writer: "Writer", roots: list[str]) -> None:
        self.writer = writer
        self.project = Project(roots)
        # code -> absolute path when a project function, else None (module and class bodies, comprehensions)
        self.codes: dict[CodeType, Optional[str]] = {}
        self.best: dict[tuple[str, int, str], dict[CodeType, int]] = {}  # per capture site: code -> chain length sent

    def function_path(self, code: CodeType) -> Optional[str]:
        path = None
        if code.co_flags & CO_OPTIMIZED and code.co_name not in _COMPREHENSIONS:
            path = self.project.path_of(code.co_filename)
        self.codes[code] = path
        return path

    def send(self, site: tuple[str, int, str], function: Optional[Step], via: list[Step]) -> None:
        try:
            self.writer.write(EVENT, {"site": list(site), "function": function, "via": via})
        except OSError:  # the supervisor's stream is gone: what was recorded so far is what it gets
            pass


_active: Optional[Run] = None


def enable(writer: "Writer", roots: list[str]) -> None:
    global _active
    _active = Run(writer, roots)


def disable() -> None:
    global _active
    _active = None


def requested() -> Optional[list[str]]:
    """The roots the supervisor asked to record (taken out of the environment: the script's own
    child processes are not verified runs)."""
    text = os.environ.pop(ENV, None)
    if text is None:
        return None
    try:
        roots = json.loads(text)
    except ValueError:
        return None
    return [str(root) for root in roots] if isinstance(roots, list) else None


def begin(inst: "Instrumentation") -> Optional["Window"]:
    """Start recording the functions a capture runs; None when --save-reach was not given."""
    run = _active
    if run is None:
        return None
    recorder = inst.recorder
    region = recorder.region
    if region is None or recorder.phase not in _CAPTURE_PHASES:
        return None  # the verifier's own warmup, or a capture torch made with no user frame
    site = (region.path, region.line, region.kind)
    if site not in run.best:
        run.best[site] = {}
        run.send(site, None, [])  # the capture is an entry even when it reaches nothing
    return Window(run, site, recorder.stop).start()


class Window:
    """One capture's recording, on the thread that captures."""

    def __init__(self, run: Run, site: tuple[str, int, str], stop: Optional[FrameType]) -> None:
        self.run = run
        self.site = site
        self.stop_frame = stop  # the capture site's frame: where chains begin
        self.best = run.best[site]
        self.thread = threading.get_ident()
        self._tool: Optional[int] = None
        self._previous: Optional[Callable[..., Any]] = None
        self._hook: Optional[Callable[..., Any]] = None

    def start(self) -> "Window":
        if sysmon.AVAILABLE:
            self._tool = sysmon.acquire("cglint reach", {sysmon.events().PY_START: self._on_start},
                                         sysmon.events().PY_START)
            if self._tool is not None:
                return self
        from cglint.verify.capture import torchmodes  # imports torch: not in the supervising process

        self._previous = sys.gettrace()
        self._hook = self._tracer(self._previous)
        if not sysmon.AVAILABLE:  # 3.12+: switching a trace function off and on costs more than it saves
            torchmodes.own_hooks.add(self._hook)
        sys.settrace(self._hook)
        return self

    def stop(self) -> None:
        if self._tool is not None:
            sysmon.release(self._tool, (sysmon.events().PY_START,), ())
            self._tool = None
            return
        if self._hook is None:
            return
        from cglint.verify.capture import torchmodes

        if sys.gettrace() == self._hook:
            sys.settrace(self._previous)
        torchmodes.own_hooks.discard(self._hook)
        self._hook = self._previous = None

    # --- the hooks -----------------------------------------------------------------
    def _on_start(self, code: CodeType, offset: int) -> Any:
        codes = self.run.codes
        path = codes[code] if code in codes else self.run.function_path(code)
        if path is None:
            return sys.monitoring.DISABLE  # type: ignore[attr-defined]  # not the project's: never again in this capture
        if threading.get_ident() == self.thread:
            self._ran(sys._getframe(1), code, path)
        return None

    def _tracer(self, previous: Optional[Callable[..., Any]]) -> Callable[..., Any]:
        """A global trace function: Python calls it as each frame starts (a "call" event) and gives
        the frame the local tracer it returns. Chained with `previous` (the guard collector's, whose
        local tracer it returns). A closure: it runs for every frame of the capture."""
        codes, function_path, ran = self.run.codes, self.run.function_path, self._ran

        def trace(frame: FrameType, event: str, arg: Any) -> None:
            code = frame.f_code
            path = codes[code] if code in codes else function_path(code)
            if path is not None:
                ran(frame, code, path)

        if previous is None:
            return trace

        def chained(frame: FrameType, event: str, arg: Any) -> Any:
            local = previous(frame, event, arg)
            code = frame.f_code
            path = codes[code] if code in codes else function_path(code)
            if path is not None:
                ran(frame, code, path)
            return local  # the previous tracer's for the frame's lines: this one needs none

        return chained

    def _ran(self, frame: FrameType, code: CodeType, path: str) -> None:
        """A project function started: keep it with the shortest chain of project frames from the capture."""
        best = self.best.get(code)
        if best == 1:
            return  # called from the capture site itself: no chain is shorter
        codes, run, site = self.run.codes, self.run, self.stop_frame
        if best is not None:
            # The nearest project frame that called it: its chain when it started was at least its
            # best, so through it this call's chain is at least one more (most calls end here: a
            # layer's helpers called again by every layer; walking whole stacks cost 20% of a capture).
            caller = frame.f_back
            while caller is not None and caller is not site:
                c = caller.f_code
                if (codes[c] if c in codes else run.function_path(c)) is not None:
                    below = self.best.get(c)
                    if below is not None and below + 1 >= best:
                        return
                    break
                caller = caller.f_back
        chain: list[FrameType] = []
        caller = frame.f_back
        while caller is not None:
            if caller is site:
                chain.append(caller)
                break
            c = caller.f_code
            known = codes[c] if c in codes else run.function_path(c)
            if known is not None:
                chain.append(caller)
            elif c.co_name == "_find_and_load" and c.co_filename.startswith("<frozen importlib"):
                return  # run by an import inside the capture: the module's setup, not captured work
            caller = caller.f_back
        if best is not None and len(chain) >= best:
            return
        self.best[code] = len(chain)
        via = [_step(f) for f in reversed(chain)]
        run.send(self.site, (path, code.co_firstlineno, qualname(code)), via)


def _step(frame: FrameType) -> Step:
    code = frame.f_code
    return (os.path.abspath(code.co_filename), frame.f_lineno or code.co_firstlineno, qualname(code))


# --- the supervising process -------------------------------------------------------------------

def collect(events_path: str) -> dict[tuple[str, int, str], dict[tuple[str, int, str], list[Step]]]:
    """Per capture site, the functions it ran, each with its shortest chain, from the event stream."""
    sites: dict[tuple[str, int, str], dict[tuple[str, int, str], list[Step]]] = {}
    try:
        stream = open(events_path, encoding="utf-8", errors="replace")  # noqa: SIM115
    except OSError:
        return sites
    with stream:
        for line in stream:
            if f'"event": "{EVENT}"' not in line:
                continue
            try:
                event = json.loads(line)
                site = tuple(event["site"])
                function = event["function"]
                via = [tuple(step) for step in event["via"]]
            except (ValueError, KeyError, TypeError):
                continue  # a line torn by a crash in the middle of its write
            reached = sites.setdefault(site, {})
            if function is None:
                continue
            key = tuple(function)
            if key not in reached or len(via) < len(reached[key]):
                reached[key] = via
    return sites


def _shown(path: str, cwd: str) -> str:
    """Relative to the working directory when below it, as the verifier's report shows paths."""
    try:
        rel = os.path.relpath(path, cwd)
    except ValueError:
        return path
    return path if rel.startswith("..") else rel


def document(collected: dict, captures: list[CaptureRecord], version: str, cwd: Optional[str] = None) -> dict[str, Any]:
    """The file's object, in `cglint reach --format json`'s shape (cglint.reach): one entry per
    capture site, in the order the run first made them."""
    from cglint.reach import CaptureReach, Reached, as_json

    cwd = cwd or os.getcwd()
    order: list[tuple[str, int, str]] = []
    for capture in captures:
        site = (capture.path, capture.line, capture.kind)
        if site not in order:
            order.append(site)
    order += [site for site in collected if site not in order]
    entries = []
    for path, line, kind in order:
        reached = [
            Reached(_shown(fpath, cwd), name, first, tuple(f"{_shown(p, cwd)}:{n} {q}" for p, n, q in via))
            for (fpath, first, name), via in collected.get((path, line, kind), {}).items()
        ]
        reached.sort(key=lambda r: (r.path, r.line, r.qualname))
        entries.append(CaptureReach(path, line, kind, reached))
    return as_json(entries, version)


def target_problem(path: str) -> Optional[str]:
    """Why `path` cannot take the file (checked before the script runs), or None."""
    if not path:
        return "--save-reach needs a file name"
    if os.path.isdir(path):
        return f"--save-reach: {path} is a directory"
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        return f"--save-reach: no such directory: {os.path.dirname(path) or folder}"
    if not os.access(folder, os.W_OK | os.X_OK) or (os.path.exists(path) and not os.access(path, os.W_OK)):
        return f"--save-reach: cannot write {path} (permission denied)"
    return None


def save(path: str, data: dict[str, Any]) -> None:
    """Write the file atomically: a temporary file beside it, then renamed over it."""
    folder = os.path.dirname(os.path.abspath(path))
    fd, temporary = tempfile.mkstemp(prefix=".cglint-reach-", suffix=".json", dir=folder)
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(temporary, 0o666 & ~umask)  # as open() would have made it (mkstemp makes 0600)
        with os.fdopen(fd, "w", encoding="utf-8") as stream:
            json.dump(data, stream, indent=2)
            stream.write("\n")
        os.replace(temporary, path)
    except BaseException:
        try:
            os.unlink(temporary)
        except OSError:
            pass
        raise
