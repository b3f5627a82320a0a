"""`cglint verify [--format text|json] [--output-file F] [--timeout S] [--save-reach F] SCRIPT [ARGS...]`.

The script runs in a child process that this one supervises (supervisor.py), as
`python SCRIPT ARGS` would run it, with every capture instrumented. Options of cglint may
come before or after SCRIPT; everything after `--` goes to the script unread.
"""
from __future__ import annotations

import contextlib
import json
import os
import sys
from typing import Any, Optional, TextIO

from cglint import __version__

EXIT_CLEAN, EXIT_FINDINGS, EXIT_USAGE = 0, 1, 2
EXIT_INTERRUPTED = 130  # 128 + SIGINT: cglint itself was stopped by Ctrl-C (the report is still written)
OPTIONS_WITH_VALUE = ("--format", "--output-file", "--timeout", "--save-reach", "--reach-root")
HELP_OPTIONS = ("-h", "--help")
USAGE = ("usage: cglint verify [--format text|json] [--output-file FILE] [--timeout SECONDS]\n"
         "                     [--save-reach FILE [--reach-root DIR]...] SCRIPT [ARGS...]")
HELP = f"""{USAGE}

Run SCRIPT as `python SCRIPT ARGS...` would, in a child process that cglint supervises,
with every CUDA-graph capture instrumented, and report the hazards seen at the lines that
caused them. With a CUDA device each capture is a real trial capture (capture errors,
syncs, host calls, host RNG, tensors rebound or freed before replay); without one, CUDA is
emulated on the CPU, captured regions run once under a tracer, and the report says what
could not be checked. The report is written however the script ends: an exception,
sys.exit, os._exit, a crash, the timeout or Ctrl-C.

arguments:
  SCRIPT                the Python script to run
  ARGS                  arguments passed to the script; put them after `--` when one
                        looks like an option of cglint (`-- --format csv`)

options:
  -h, --help            show this help and exit
  --format {{text,json}}  how findings are written (default: text); with json on stdout,
                        the script's own output goes to stderr
  --output-file FILE    write the report to FILE instead of stdout
  --timeout SECONDS     stop the script after SECONDS (default: no limit); the report
                        says where it was and keeps everything seen until then
  --save-reach FILE     also write to FILE, as JSON, the project functions that really
                        ran during each capture (the shape of `cglint reach --format
                        json`, to compare with what the static checker reaches); written
                        however the script ends
  --reach-root DIR      a tree whose functions count as the project's for --save-reach
                        (repeatable; when given, only these trees count). Default: the
                        script's directory and the current directory, less site-packages,
                        dist-packages, the standard library and cglint itself

Options may come before or after SCRIPT; everything after `--` goes to the script.
A summary of the captures (and notes on what was not checked) goes to stderr.

exit status:
  0  no findings and the script exited with status 0
  1  findings, or the script failed (raised, exited with a non-zero status, crashed,
     was killed or timed out)
  2  usage error: unknown option, no such script, torch not installed, a --save-reach
     FILE that cannot be written
  130  cglint verify was interrupted (Ctrl-C); the report of what was seen is written"""


class Usage(Exception):
    pass


class HelpRequested(Exception):
    pass


def parse(argv: list[str]) -> tuple[dict[str, Any], str, list[str]]:
    """(options, script, script arguments)."""
    options: dict[str, Any] = {"format": "text", "output": None, "timeout": None, "save_reach": None,
                               "reach_roots": []}
    script, rest = None, []
    args = list(argv)
    while args:
        arg = args.pop(0)
        if arg == "--" and script is not None:
            rest.extend(args)
            break
        if arg in HELP_OPTIONS and script is None:
            raise HelpRequested()
        name, eq, value = arg.partition("=")
        if name in OPTIONS_WITH_VALUE:
            if not eq:
                if not args:
                    raise Usage(f"{name} needs a value")
                value = args.pop(0)
            if name == "--reach-root":
                options["reach_roots"].append(value)
            else:
                options.update(_option(name, value))
        elif script is None:
            if arg.startswith("-") and arg != "--":
                raise Usage(f"unknown option {arg}\n{USAGE}")
            script = args.pop(0) if arg == "--" and args else arg
        else:
            rest.append(arg)
    if script is None:
        raise Usage(USAGE)
    return options, script, rest


def _option(name: str, value: str) -> dict[str, Any]:
    if name == "--format":
        if value not in ("text", "json"):
            raise Usage(f"--format must be text or json, not {value!r}")
        return {"format": value}
    if name == "--timeout":
        try:
            seconds = float(value)
        except ValueError:
            seconds = 0.0
        if not seconds > 0:
            raise Usage(f"--timeout must be a positive number of seconds, not {value!r}")
        return {"timeout": seconds}
    if name == "--save-reach":
        return {"save_reach": value}
    return {"output": value}


def main(argv: list[str]) -> int:
    try:
        options, script, script_args = parse(argv)
    except HelpRequested:
        print(HELP)
        return EXIT_CLEAN
    except Usage as exc:
        print(f"cglint verify: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if not os.path.isfile(script):
        print(f"cglint verify: no such script: {script}", file=sys.stderr)
        return EXIT_USAGE
    problem = _reach_problem(options)
    if problem:
        print(f"cglint verify: {problem}", file=sys.stderr)
        return EXIT_USAGE
    import importlib.util

    if importlib.util.find_spec("torch") is None:  # not imported here: the child does
        print("cglint verify: torch is not installed (pip install 'cglint[verify]')", file=sys.stderr)
        return EXIT_USAGE
    from cglint.verify.run.supervisor import supervise

    # JSON on stdout must stay parseable: the script's own prints go to stderr then.
    quiet = options["format"] == "json" and options["output"] is None
    stderr = _open_stream("stderr", 2)
    result = supervise(script, script_args, timeout=options["timeout"],
                       script_stdout=stderr if quiet else _open_stream("stdout", 1), script_stderr=stderr,
                       reach_roots=_reach_roots(options, script) if options["save_reach"] else None)
    saved = _save_reach(result, options["save_reach"])
    _write(result, options["format"], options["output"])
    _summary(result, _open_stream("stderr", 2))
    if result.interrupted:
        return EXIT_INTERRUPTED
    if not saved:
        return EXIT_USAGE
    return EXIT_FINDINGS if result.findings or result.failed else EXIT_CLEAN


def _reach_problem(options: dict[str, Any]) -> Optional[str]:
    """Why --save-reach and --reach-root cannot be honoured (checked before the script runs)."""
    from cglint.verify.run import reach

    if options["reach_roots"] and not options["save_reach"]:
        return "--reach-root needs --save-reach FILE"
    for root in options["reach_roots"]:
        if not os.path.isdir(root):
            return f"--reach-root: no such directory: {root}"
    return reach.target_problem(options["save_reach"]) if options["save_reach"] is not None else None


def _reach_roots(options: dict[str, Any], script: str) -> list[str]:
    """The trees whose functions count: those given, else the script's directory and this one."""
    roots = options["reach_roots"] or [os.path.dirname(os.path.abspath(script)), os.getcwd()]
    return list(dict.fromkeys(os.path.abspath(root) for root in roots))


def _save_reach(result: Any, path: Optional[str]) -> bool:
    """Write the --save-reach file (when asked); False when it could not be written."""
    if path is None:
        return True
    from cglint.verify.run import reach

    try:
        reach.save(path, reach.document(result.reach or {}, result.captures, __version__))
    except OSError as exc:
        print(f"cglint verify: cannot write {path}: {exc.strerror or exc}", file=_open_stream("stderr", 2))
        return False
    return True


def _open_stream(name: str, fd: int) -> TextIO:
    """sys.stdout or sys.stderr, reopened on its file descriptor if it was closed."""
    stream = getattr(sys, name)
    if stream is None or getattr(stream, "closed", False):
        stream = open(fd, "w", encoding="utf-8", errors="replace", closefd=False)  # noqa: SIM115
        setattr(sys, name, stream)
    return stream


def as_json(result: Any) -> dict[str, Any]:
    """The JSON report: the object of `cglint check` plus mode, captures, run and notes."""
    from cglint.report.json_format import as_json as check_json

    data = check_json(result.findings, 1)
    data.update(mode=result.mode, captures=[c.to_json() for c in result.captures], run=result.run, notes=result.notes)
    return data


def _write(result: Any, fmt: str, output: Optional[str]) -> None:
    from cglint.report import write_report

    with (open(output, "w", encoding="utf-8") if output else contextlib.nullcontext(_open_stream("stdout", 1))) as stream:
        if fmt == "json":
            json.dump(as_json(result), stream, indent=2)
            stream.write("\n")
            return
        if result.findings:
            write_report(result.findings, fmt="text", files_checked=1, stream=stream)
        for line in verdict(result):
            stream.write(line + "\n")


def verdict(result: Any) -> list[str]:
    """What the run verified, in words; "All checks passed" only for verified captures."""
    captures = result.captures
    failed = [c for c in captures if c.status == "failed"]
    unreplayed = [c for c in captures if c.status == "not-replayed"]
    gaps = []
    if result.mode == "cpu":
        gaps.append("CUDA was emulated on the CPU (no GPU): real capture errors, replays, graph memory and "
                    "timing were not verified")
    elif result.mode is None:
        gaps.append("the script ended before the verifier started")
    if not captures:
        gaps.append("the script made no CUDA-graph capture, so no capture was verified")
    for capture in failed:
        why = f": {capture.error}" if capture.error else ""
        gaps.append(f"the capture at {capture.label} failed{why}")
    for capture in unreplayed:
        gaps.append(f"the capture at {capture.label} was never replayed (the pre-replay checks did not run)")
    if not result.run["completed"] or result.failed:
        gaps.append(f"the script {result.status}: what it would have run after that was not checked")
    if not result.findings and not gaps:
        return [f"All checks passed ({len(captures)} capture{'s' if len(captures) != 1 else ''} verified)."]
    lines = [] if result.findings else ["No findings, but not everything was verified:"]
    if result.findings:
        lines.append("Not verified:" if gaps else "")
    return [line for line in lines if line] + [f"  - {gap}" for gap in gaps]


def _summary(result: Any, stream: TextIO) -> None:
    label = {"gpu": "GPU", "cpu": "CPU trace (CUDA emulated)"}.get(result.mode or "", "unknown")
    print(f"cglint verify: {label} mode, {len(result.captures)} capture(s)", file=stream)
    for capture in result.captures:
        pool = f", pool {capture.pool_bytes / 2**20:.1f} MiB" if capture.pool_bytes else ""
        state = {"ok": "captured", "not-replayed": "captured", "failed": "FAILED"}[capture.status]
        if result.mode == "cpu" and capture.status != "failed":
            state = "traced on the CPU"
        print(f"  {capture.label}: {state} in {capture.capture_seconds * 1000:.1f} ms{pool}, {capture.replays} replay(s)",
              file=stream)
    for note in result.notes:
        print(f"  note: {note}", file=stream)
    if result.failed or not result.run["completed"]:
        print(f"cglint verify: the script {result.status}", file=stream)
