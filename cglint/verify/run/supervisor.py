"""The supervising side of `cglint verify`: run the script in a child process and build the
report from what the child streamed, however the child ended.

The child (script.py) writes its state to an event file as it changes and faulthandler's
tracebacks to a second file. The parent relays the child's output, waits for it (up to
the timeout), forwards Ctrl-C, and then reads both files: a child that ended by os._exit,
a signal, a crash or a kill still leaves every finding and capture it had seen.
"""
from __future__ import annotations

import codecs
import json
import os
import re
import signal
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
from dataclasses import dataclass, field
from typing import IO, Any, Optional, TextIO

from cglint.findings import Finding
from cglint.verify.run import events, reach
from cglint.verify.run.captures import CaptureRecord

# How long a child asked to stop (Ctrl-C) may take to write its report before it is killed.
INTERRUPT_GRACE_S = 10.0
# How long faulthandler gets to write where a timed-out child hangs before the kill.
DUMP_GRACE_S = 1.0
_FAULT_FRAME = re.compile(r'^\s*File "(?P<path>[^"]+)", line (?P<line>\d+)')


@dataclass
class Supervised:
    mode: Optional[str]  # "gpu" or "cpu"; None when the child died before it could say
    findings: list[Finding]
    captures: list[CaptureRecord]
    notes: list[str]
    run: dict[str, Any]
    status: str  # how the script ended, in words
    failed: bool
    interrupted: bool = False  # cglint itself was interrupted (Ctrl-C)
    where: Optional[str] = None  # the user line a crash or a hang happened at
    faults: list[str] = field(default_factory=list)
    reach: Optional[dict[Any, Any]] = None  # --save-reach: per capture site, the functions it ran


def supervise(script: str, args: list[str], *, timeout: Optional[float], script_stdout: TextIO,
              script_stderr: TextIO, reach_roots: Optional[list[str]] = None) -> Supervised:
    """reach_roots: record the functions of these trees that each capture runs (--save-reach);
    the result's `reach` holds them (reach.collect)."""
    with tempfile.TemporaryDirectory(prefix="cglint-verify-") as folder:
        events_path, fault_path = os.path.join(folder, "events.jsonl"), os.path.join(folder, "faults.txt")
        command = [sys.executable, "-m", "cglint.verify.run.child", events_path, fault_path, script, *args]
        # Unbuffered: the script's output arrives as it is printed, and none is lost by os._exit.
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        env.pop(reach.ENV, None)
        if reach_roots is not None:
            env[reach.ENV] = json.dumps(reach_roots)
        child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
        relays = [_relay(child.stdout, script_stdout), _relay(child.stderr, script_stderr)]
        waited = _Waiter(child)
        waited.wait(timeout)
        for relay in relays:
            relay.join(timeout=5)
        result = _result(events.read(events_path), _read(fault_path), child.returncode, waited, timeout)
        if reach_roots is not None:
            result.reach = reach.collect(events_path)
        return result


class _Waiter:
    """Waits for the child; Ctrl-C is passed on to it, a timeout kills it after a traceback dump."""

    def __init__(self, child: subprocess.Popen) -> None:
        self.child = child
        self.interrupted = self.timed_out = False

    def _on_interrupt(self, signum: int, frame: Any) -> None:
        self.interrupted = True
        self._signal(signal.SIGINT)

    def _signal(self, signum: int) -> None:
        try:
            self.child.send_signal(signum)
        except OSError:  # already gone
            pass

    def wait(self, timeout: Optional[float]) -> None:
        try:
            previous = signal.signal(signal.SIGINT, self._on_interrupt)
        except ValueError:  # not the main thread: nobody can press Ctrl-C at us
            previous = None
        try:
            deadline = None if timeout is None else time.monotonic() + timeout
            while self.child.poll() is None:
                if self.interrupted:
                    self._stop_after(INTERRUPT_GRACE_S)
                    break
                if deadline is not None and time.monotonic() >= deadline:
                    self.timed_out = True
                    self._stop_after(0.0)
                    break
                try:
                    self.child.wait(timeout=0.05)
                except subprocess.TimeoutExpired:
                    pass
        finally:
            if previous is not None:
                signal.signal(signal.SIGINT, previous)

    def _stop_after(self, grace: float) -> None:
        try:
            self.child.wait(timeout=grace)
            return
        except subprocess.TimeoutExpired:
            pass
        if hasattr(signal, "SIGUSR1"):
            self._signal(signal.SIGUSR1)  # faulthandler in the child: where is it stuck?
            time.sleep(DUMP_GRACE_S)
        self.child.kill()
        self.child.wait()


def _relay(source: Optional[IO[bytes]], target: TextIO) -> threading.Thread:
    def copy() -> None:
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        assert source is not None  # the child's pipe
        fd = source.fileno()
        while True:
            chunk = os.read(fd, 65536)
            text = decoder.decode(chunk, final=not chunk)
            if text:
                try:
                    target.write(text)
                    target.flush()
                except (OSError, ValueError):  # our own stream closed: keep draining the pipe
                    pass
            if not chunk:
                break
        source.close()

    thread = threading.Thread(target=copy, daemon=True)
    thread.start()
    return thread


def _read(path: str) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as stream:
            return stream.read()
    except OSError:
        return ""


def _result(seen: dict[str, dict[str, Any]], faults: str, returncode: int, waited: _Waiter,
            timeout: Optional[float]) -> Supervised:
    state = seen.get(events.STATE, {})
    findings = [Finding.from_json(f) for f in state.get("findings", [])]
    where = user_line_of(faults)
    at = f" at {where}" if where else ""
    end = seen.get(events.END)
    if waited.timed_out:
        status = f"timed out after {timeout:g} s{at} and was stopped"
        run = {"exit_status": returncode, "error": f"timed out after {timeout:g} s{at}", "completed": False}
    elif end is not None and not (waited.interrupted and returncode < 0):
        status, run = end["status"], {k: end[k] for k in ("exit_status", "error", "completed")}
        return Supervised(state.get("mode"), findings, _captures(state), state.get("notes", []), run,
                          status, bool(end["failed"]), waited.interrupted, where)
    elif returncode < 0:
        name = _signal_name(-returncode)
        status = f"was killed by {name}{at}" if waited.interrupted else f"crashed ({name}){at}"
        run = {"exit_status": returncode, "error": f"{name}{at}", "completed": False}
    else:
        status = f"ended with status {returncode} before it could report how (the child process exited abruptly)"
        run = {"exit_status": returncode, "error": status, "completed": False}
    return Supervised(state.get("mode"), findings, _captures(state), state.get("notes", []), run,
                      status, True, waited.interrupted, where, [faults] if faults else [])


def _captures(state: dict[str, Any]) -> list[CaptureRecord]:
    return [CaptureRecord.from_json(c) for c in state.get("captures", [])]


def _signal_name(number: int) -> str:
    try:
        name = signal.Signals(number).name
    except ValueError:
        return f"signal {number}"
    described = signal.strsignal(number) if hasattr(signal, "strsignal") else None
    return f"{name} ({described})" if described else name


def _library_roots() -> tuple[str, ...]:
    here = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # cglint
    paths = [here] + [sysconfig.get_paths().get(k) for k in ("stdlib", "platstdlib")]
    return tuple(os.path.abspath(p) + os.sep for p in paths if p)


def user_line_of(faults: str) -> Optional[str]:
    """The innermost user line of the crashing (or dumped) thread in a faulthandler report."""
    blocks = re.split(r"\n(?=(?:Current thread|Thread|Stack \(most recent call first\)))", faults)
    current = next((b for b in blocks if b.startswith("Current thread")), blocks[-1] if blocks else "")
    roots = _library_roots()
    for line in current.splitlines():
        match = _FAULT_FRAME.match(line)
        if not match:
            continue
        path = os.path.abspath(match["path"])
        if path.startswith(roots) or f"{os.sep}site-packages{os.sep}" in path or match["path"].startswith("<"):
            continue
        rel = os.path.relpath(path)
        return f"{path if rel.startswith('..') else rel}:{match['line']}"
    return None
