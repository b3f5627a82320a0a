"""Running a user's script in this process with every capture instrumented."""
from __future__ import annotations

import os
import runpy
import sys
import traceback
from dataclasses import dataclass, field
from typing import Optional, TextIO

from cglint.findings import Finding
from cglint.verify import session as sessions
from cglint.verify.session import GraphInfo

CPU_NOTES = (
    "no CUDA device: CPU trace mode. Each captured region ran once on the CPU under the tracer "
    "(syncing operators, host calls, host RNG); not checked: real capture errors, replays, tensors "
    "rebound before replay, pool memory and timing. Run on a GPU machine for those."
)


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
    if gpu:
        from cglint.verify import patches as instrumentation
    else:
        from cglint.verify import cpushims as instrumentation
        session.note(CPU_NOTES)
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
        failed, status = True, f"raised {type(exc).__name__}: {exc}".splitlines()[0]
        session.close_open(exc)
        traceback.print_exc(file=sys.stderr)
        if not gpu and "CUDA" in str(exc):
            session.note("the script needs a GPU past this point (it asked for CUDA); the rest was not checked")
    finally:
        session.close_open(None)
        instrumentation.uninstall()
        sys.argv, sys.path[:] = saved_argv, saved_path
        sys.stdout = saved_stdout
        sessions.end()
    return Outcome("GPU" if gpu else "CPU trace", session.findings(), session.graphs, session.notes, status, failed)
