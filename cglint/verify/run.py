"""Running a user's script in this process with every capture instrumented."""
from __future__ import annotations

import os
import runpy
import sys
import traceback
from dataclasses import dataclass, field
from typing import Optional, TextIO

from cglint.findings import Finding
from cglint.verify import backend
from cglint.verify import session as sessions
from cglint.verify.session import GraphInfo


@dataclass
class Outcome:
    mode: str
    findings: list[Finding]
    graphs: list[GraphInfo]
    notes: list[str] = field(default_factory=list)
    status: str = "exited with status 0"
    failed: bool = False


def run_script(script: str, args: list[str], script_stdout: Optional[TextIO] = None) -> Outcome:
    import torch

    gpu = torch.cuda.is_available()
    session = sessions.begin(gpu)
    instrumentation = backend.select(gpu)
    for note in instrumentation.script_notes:
        session.note(note)
    saved_argv, saved_path, saved_stdout = sys.argv, list(sys.path), sys.stdout
    sys.argv = [script, *args]
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
    if script_stdout is not None:
        sys.stdout = script_stdout
    status, failed = "exited with status 0", False
    instrumentation.install(session)
    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit as exc:
        code = exc.code
        failed = code not in (None, 0)
        status = f"exited with status {code if code is not None else 0}"
    except BaseException as exc:  # the script's crash: report it, never swallow it
        failed, status = True, _describe(exc)
        session.close_open(exc)
        try:
            traceback.print_exc(file=sys.__stderr__ or sys.stderr)
        except Exception:  # noqa: BLE001 - an exception whose str() raises, a closed stream
            pass
        if not gpu and "CUDA" in _text(exc):
            session.note("the script needs a GPU past this point (it asked for CUDA); the rest was not checked")
    finally:
        session.close_open(None)
        instrumentation.uninstall()
        sys.argv, sys.path[:] = saved_argv, saved_path
        sys.stdout = saved_stdout
        sessions.end()
    return Outcome("GPU" if gpu else "CPU trace", session.findings(), session.graphs, session.notes, status, failed)


def _text(exc: BaseException) -> str:
    """str(exc), even for exceptions whose __str__ raises."""
    try:
        return str(exc)
    except Exception:  # noqa: BLE001
        return f"<{type(exc).__name__} whose message cannot be shown>"


def _describe(exc: BaseException) -> str:
    if isinstance(exc, KeyboardInterrupt):
        return "was interrupted (KeyboardInterrupt)"
    text = _text(exc).splitlines()
    return f"raised {type(exc).__name__}: {text[0]}" if text and text[0] else f"raised {type(exc).__name__}"
