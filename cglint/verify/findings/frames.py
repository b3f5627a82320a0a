"""Which stack frame is the user's: every runtime observation is reported there.

A frame is "library" when its file lies in torch (or triton), in cglint itself, in the
standard library or in the test runner; the first frame outside those, counted from the
innermost, is the line the user wrote. Other third-party packages count as user code:
a hazard inside a model library is best shown at that library's line.
"""
from __future__ import annotations

import linecache
import os
import sys
import sysconfig
from dataclasses import dataclass
from functools import lru_cache
from types import CodeType, FrameType, ModuleType
from typing import Optional

# Test and tooling packages count as library too: hypothesis times garbage collections
# from a gc callback, which can fire during a capture and looked like a user's timer call.
# torch's own dependencies too (sympy and mpmath run under Dynamo and Inductor, triton's JIT
# when a kernel compiles): their caches looked like the user's host containers.
_LIBRARY_PACKAGES = ("torch", "triton", "functorch", "numpy", "_pytest", "pytest", "pluggy", "hypothesis", "coverage",
                     "libcst", "rich",  # cglint's own dependencies, wherever they are installed
                     "sympy", "mpmath", "networkx", "jinja2", "filelock", "fsspec", "typing_extensions")


def _roots_of(paths) -> tuple[str, ...]:
    return tuple(sorted({os.path.abspath(p).rstrip(os.sep) + os.sep for p in paths if p}))


def _library_roots() -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(package folders that are never user code, standard-library folders)."""
    here = os.path.dirname(os.path.abspath(__file__))  # cglint/verify/findings
    packages = [os.path.dirname(os.path.dirname(here))]  # cglint
    for name in _LIBRARY_PACKAGES:
        module_file = getattr(sys.modules.get(name), "__file__", None)
        if module_file:
            packages.append(os.path.dirname(module_file))
    stdlib = [sysconfig.get_paths().get(key) for key in ("stdlib", "platstdlib")]
    stdlib += [os.path.realpath(p) for p in stdlib if p]
    return _roots_of(packages), _roots_of(stdlib)


_packages: tuple[str, ...] = ()
_stdlib: tuple[str, ...] = ()
_verdicts: dict[CodeType, bool] = {}
verdicts = _verdicts  # read-only for others: the hot paths of the tracers look codes up here directly
_THIRD_PARTY = (f"{os.sep}site-packages{os.sep}", f"{os.sep}dist-packages{os.sep}")
# Library packages installed but not imported when the folders were computed (triton is
# imported by the first kernel compile, inside a capture).
_LIBRARY_SEGMENTS = tuple(f"{root}{name}{os.sep}" for root in _THIRD_PARTY for name in _LIBRARY_PACKAGES)


_loaded: tuple = ()  # the library packages' files when the folders were last computed


def refresh() -> None:
    """Recompute the library folders when a library package got imported since (torch, numpy)."""
    global _packages, _stdlib, _loaded
    loaded = tuple(getattr(sys.modules.get(name), "__file__", None) for name in _LIBRARY_PACKAGES)
    if loaded == _loaded and _packages:
        return  # every capture starts with a refresh: keep the verdicts of the code seen so far
    _packages, _stdlib = _library_roots()
    _loaded = loaded
    _verdicts.clear()


def _is_user_path(name: str) -> bool:
    if name.startswith("<"):
        # <frozen importlib...> is the interpreter's; <string> and <stdin> are the user's
        return not name.startswith("<frozen")
    path = os.path.abspath(name)
    if path.startswith(_packages) or f"{os.sep}torchinductor_" in path or any(s in path for s in _LIBRARY_SEGMENTS):
        return False  # torch.compile's generated code counts as torch
    return not path.startswith(_stdlib) or any(marker in path for marker in _THIRD_PARTY)


def is_user_path(name: str) -> bool:
    """A file path (as torch prints it in logs and tracebacks) of the user's code."""
    return bool(name) and _is_user_path(name)


def is_user_module(module: object) -> bool:
    """A module loaded from a file of the user's code. Its `__file__` is read from the module's
    own dict, past any __getattribute__: a lazily loaded module (importlib.util.LazyLoader)
    would otherwise run its code on the read."""
    space = object.__getattribute__(module, "__dict__") if isinstance(module, ModuleType) else {}
    path = space.get("__file__")
    return isinstance(path, str) and is_user_path(path)


def is_user_code(code: CodeType) -> bool:
    verdict = _verdicts.get(code)
    if verdict is None:
        verdict = _verdicts[code] = _is_user_path(code.co_filename)
    return verdict


def user_frame(frame: Optional[FrameType]) -> Optional[FrameType]:
    """The innermost user frame at or above `frame`."""
    while frame is not None and not is_user_code(frame.f_code):
        frame = frame.f_back
    return frame


def current_user_frame(skip: int = 1) -> Optional[FrameType]:
    return user_frame(sys._getframe(skip))


@dataclass(frozen=True)
class Where:
    """A point in the user's source."""

    path: str
    line: int
    column: int = 1
    end_line: int = 0
    end_column: int = 0
    function: str = ""

    @property
    def text(self) -> str:
        return linecache.getline(self.path, self.line).strip()

    def label(self) -> str:
        return f"{display_path(self.path)}:{self.line} {self.text or self.function}".rstrip()


def display_path(path: str) -> str:
    """Relative to the working directory when below it, as the static checker prints paths."""
    return _display_path(path, os.getcwd())


@lru_cache(maxsize=4096)
def _display_path(path: str, cwd: str) -> str:  # a capture names the same few files hundreds of times
    try:
        rel = os.path.relpath(path, cwd)
    except ValueError:
        return path
    return path if rel.startswith("..") else rel


@lru_cache(maxsize=4096)
def _positions(code: CodeType) -> list:
    get = getattr(code, "co_positions", None)  # Python 3.11+
    return list(get()) if get else []


def where(frame: FrameType, lasti: Optional[int] = None, line: Optional[int] = None) -> Where:
    """The position of `frame` (or of a traceback entry's lasti and line in it)."""
    return position(frame.f_code, line or frame.f_lineno or frame.f_code.co_firstlineno,
                    frame.f_lasti if lasti is None else lasti)


def position(code: CodeType, line: int, lasti: int) -> Where:
    """The position of instruction `lasti` of `code`, on `line`."""
    col, end_line, end_col = 1, line, 0
    positions = _positions(code)
    if positions and lasti >= 0:
        try:
            start, stop, c0, c1 = positions[lasti // 2]
        except (IndexError, ValueError):
            start = None
        if start == line and c0 is not None:
            col, end_line, end_col = c0 + 1, stop or line, (c1 or c0) + 1
    return Where(code.co_filename, line, col, end_line, end_col, code.co_name)


def user_stack(frame: Optional[FrameType], stop: Optional[FrameType] = None) -> list[Where]:
    """User frames from `frame` outwards up to and including `stop`, outermost first."""
    return resolve(stack_positions(frame, stop))


Position = tuple[CodeType, int, int]  # (code, line, lasti): a frame's place, kept after the frame is gone


def stack_positions(frame: Optional[FrameType], stop: Optional[FrameType] = None) -> tuple[Position, ...]:
    """What user_stack shows, unresolved: cheap to take for something that may never be reported."""
    found: list[Position] = []
    while frame is not None:
        if is_user_code(frame.f_code):
            found.append((frame.f_code, frame.f_lineno or frame.f_code.co_firstlineno, frame.f_lasti))
        if frame is stop:
            break
        frame = frame.f_back
    return tuple(found[::-1])


def resolve(stack: tuple[Position, ...]) -> list[Where]:
    return [position(code, line, lasti) for code, line, lasti in stack]


refresh()
