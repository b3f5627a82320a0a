"""Running a user's script with every capture instrumented: the side of `cglint verify`
that lives in the supervised child process.

The script runs as `python SCRIPT ARGS` would run it. Every change of what the run has
seen is written to the event stream at once (see events.py), and so is how the script
ended, from wherever it ends: its last line, an exception, sys.exit, os._exit (patched to
write first) or Ctrl-C. A crash or a kill writes nothing more; the supervisor knows from
the exit signal and from the traceback faulthandler wrote.
"""
from __future__ import annotations

import faulthandler
import os
import runpy
import signal
import sys
import traceback
from dataclasses import dataclass, field
from typing import Any, NoReturn, Optional

from cglint.findings import Finding
from cglint.verify import backend
from cglint.verify.compiled import regions
from cglint.verify.findings import errors, frames
from cglint.verify.run import events, reach
from cglint.verify.run import session as sessions
from cglint.verify.run.captures import CaptureRecord
from cglint.verify.run.session import Session

# The status Python's own exit reports for an uncaught KeyboardInterrupt (128 + SIGINT).
INTERRUPTED_STATUS = 130


@dataclass
class Outcome:
    mode: str  # "gpu" or "cpu"
    findings: list[Finding]
    captures: list[CaptureRecord]
    notes: list[str] = field(default_factory=list)
    run: dict[str, Any] = field(default_factory=lambda: ended(0))
    status: str = "exited with status 0"  # how the script ended, in words
    failed: bool = False


def ended(exit_status: Any, error: Optional[str] = None, completed: bool = True) -> dict[str, Any]:
    """The report's "run" object (docs/design.md, JSON output)."""
    return {"exit_status": exit_status, "error": error, "completed": completed}


def state(session: Session, mode: str) -> dict[str, Any]:
    return {"mode": mode, "findings": [f.to_json() for f in session.findings()],
            "captures": [c.to_json() for c in session.captures()], "notes": list(session.notes)}


def run_script(script: str, args: list[str], stream: Optional[events.Writer] = None,
               fault_file: Optional[str] = None, reach_roots: Optional[list[str]] = None) -> Outcome:
    import torch

    gpu = torch.cuda.is_available()
    instrumentation = backend.select(gpu)
    mode = instrumentation.mode

    def publish(current: Session) -> None:
        if stream is not None:
            stream.write(events.STATE, state(current, mode))

    session = sessions.begin(gpu, listener=publish if stream is not None else None)
    for note in instrumentation.script_notes:
        session.note(note)
    publish(session)  # the mode, even if the script dies at once
    real_exit = os._exit

    # `status`, as os._exit names it: a caller may pass it by keyword.
    def exit_now(status: int) -> NoReturn:  # os._exit skips every finally: write the end first
        caller = frames.current_user_frame(2)
        where = frames.where(caller) if caller else None
        at = f" at {frames.display_path(where.path)}:{where.line}" if where else ""
        publish(session)
        if stream is not None:
            stream.write(events.END, {**ended(status, f"os._exit({status}){at}", False), "failed": status != 0,
                                      "status": f"called os._exit({status}){at}"})
        real_exit(status)

    saved_argv, saved_path = sys.argv, list(sys.path)
    saved_sigint = signal.getsignal(signal.SIGINT)  # the script's handlers, or our SIG_IGN, must not outlive it
    sys.argv = [script, *args]
    sys.path[0] = os.path.dirname(os.path.abspath(script))  # as `python SCRIPT` sets it
    fault = open(fault_file, "w") if fault_file else None  # noqa: SIM115 - held until the end
    if fault is not None:
        faulthandler.enable(fault, all_threads=True)
        if hasattr(signal, "SIGUSR1"):  # the supervisor asks where a script hangs before killing it
            faulthandler.register(signal.SIGUSR1, fault, all_threads=True)
    os._exit = exit_now
    run, status, failed = ended(0), "exited with status 0", False
    if reach_roots is not None and stream is not None:  # --save-reach: each capture's functions, streamed
        reach.enable(stream, reach_roots)
    instrumentation.install(session)
    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit as exc:
        code = exc.code
        number = code if isinstance(code, int) else (0 if code is None else 1)
        failed = number != 0
        status = f"exited with status {code if code is not None else 0}"
        run = ended(number, None if isinstance(code, int) or code is None else f"SystemExit: {code}")
    except BaseException as exc:  # noqa: BLE001 - the script's crash: report it, never swallow it
        failed, status = True, _describe(exc)
        interrupted = isinstance(exc, KeyboardInterrupt)
        if interrupted:  # a second Ctrl-C must not cut the report short
            signal.signal(signal.SIGINT, signal.SIG_IGN)
        run = ended(INTERRUPTED_STATUS if interrupted else 1, errors.first_line(exc), False)
        session.close_open(exc)
        regions.script_raised(exc)  # torch's errors about compiled functions, at the user's line
        try:
            traceback.print_exc(file=sys.__stderr__ or sys.stderr)
        except Exception:  # noqa: BLE001 - an exception whose str() raises, a closed stream
            pass
        if not gpu and "CUDA" in errors.text_of(exc):
            session.note("the script used a CUDA feature the CPU emulation does not cover; the rest was not checked")
    finally:
        os._exit = real_exit
        session.close_open(None)
        reach.disable()
        instrumentation.uninstall()
        sys.argv, sys.path[:] = saved_argv, saved_path
        publish(session)
        if stream is not None:
            stream.write(events.END, {**run, "failed": failed, "status": status})
        sessions.end()
        _restore_sigint(saved_sigint)
    return Outcome(mode, session.findings(), session.captures(), session.notes, run, status, failed)


def _restore_sigint(handler: Any) -> None:
    """Put back the caller's Ctrl-C handler: a Python API caller (a test run) whose process
    kept SIG_IGN would pass it on to every process it starts afterwards."""
    if handler is None:  # installed outside Python: nothing to put back
        return
    try:
        signal.signal(signal.SIGINT, handler)
    except ValueError:  # not the main thread
        pass


def _describe(exc: BaseException) -> str:
    if isinstance(exc, KeyboardInterrupt):
        return "was interrupted (KeyboardInterrupt)"
    text = errors.text_of(exc).splitlines()
    return f"raised {type(exc).__name__}: {text[0]}" if text and text[0] else f"raised {type(exc).__name__}"


def main(argv: list[str]) -> int:
    """The child: `python -m cglint.verify.run.child EVENTS FAULTS SCRIPT [ARGS...]`."""
    events_path, fault_path, script, *args = argv
    # The supervisor passes the user's Ctrl-C on to us: honour it even where we were started
    # ignoring SIGINT (by a process that ignores it, as a background job's does), or the
    # script would run on until killed and its report be lost.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    outcome = run_script(script, args, events.Writer(events_path), fault_path, reach.requested())
    return 1 if outcome.failed else 0
