"""`cglint verify [--format text|json] [--output-file F] SCRIPT [ARGS...]`.

The script runs in this process, as `python SCRIPT ARGS` would run it, with every capture
instrumented. Options of cglint may come before or after SCRIPT; everything after `--`
goes to the script unread. Exit: 0 no findings, 1 findings or the script failed,
2 usage error (no such script, torch not installed).
"""
from __future__ import annotations

import contextlib
import os
import sys
from typing import Optional, TextIO

EXIT_CLEAN, EXIT_FINDINGS, EXIT_USAGE = 0, 1, 2
OPTIONS_WITH_VALUE = ("--format", "--output-file")
HELP_OPTIONS = ("-h", "--help")
USAGE = "usage: cglint verify [--format text|json] [--output-file FILE] SCRIPT [ARGS...]"
HELP = f"""{USAGE}

Run SCRIPT as `python SCRIPT ARGS...` would, with every CUDA-graph capture instrumented, and
report the hazards seen at the lines that caused them. With a CUDA device each capture is
a real trial capture (capture errors, syncs, host calls, host RNG, tensors rebound or freed
before replay); without one, captured regions run once on the CPU under a tracer, and the
report says what could not be checked.

arguments:
  SCRIPT                the Python script to run
  ARGS                  arguments passed to the script; put them after `--` when one
                        looks like an option of cglint (`-- --format csv`)

options:
  -h, --help            show this help and exit
  --format {{text,json}}  how findings are written (default: text); with json on stdout,
                        the script's own output goes to stderr
  --output-file FILE    write the findings to FILE instead of stdout

Options may come before or after SCRIPT; everything after `--` goes to the script.
A summary of the captures (and notes on what was not checked) goes to stderr.

exit status:
  0  no findings and the script exited with status 0
  1  findings, or the script failed (raised, or exited with a non-zero status)
  2  usage error: unknown option, no such script, torch not installed"""


class Usage(Exception):
    pass


class HelpRequested(Exception):
    pass


def parse(argv: list[str]) -> tuple[str, Optional[str], str, list[str]]:
    """(format, output file, script, script arguments)."""
    fmt, output, script, rest = "text", None, None, []
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
            if name == "--format":
                if value not in ("text", "json"):
                    raise Usage(f"--format must be text or json, not {value!r}")
                fmt = value
            else:
                output = value
        elif script is None:
            if arg.startswith("-") and arg != "--":
                raise Usage(f"unknown option {arg}\n{USAGE}")
            script = args.pop(0) if arg == "--" and args else arg
        else:
            rest.append(arg)
    if script is None:
        raise Usage(USAGE)
    return fmt, output, script, rest


def main(argv: list[str]) -> int:
    try:
        fmt, output, script, script_args = parse(argv)
    except HelpRequested:
        print(HELP)
        return EXIT_CLEAN
    except Usage as exc:
        print(f"cglint verify: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if not os.path.isfile(script):
        print(f"cglint verify: no such script: {script}", file=sys.stderr)
        return EXIT_USAGE
    try:
        import torch  # noqa: F401
    except ImportError:
        print("cglint verify: torch is not installed (pip install 'cglint[verify]')", file=sys.stderr)
        return EXIT_USAGE
    from cglint.verify.run import run_script

    # JSON on stdout must stay parseable: the script's own prints go to stderr then.
    quiet = fmt == "json" and output is None
    outcome = run_script(script, script_args, script_stdout=sys.stderr if quiet else None)
    _write(outcome.findings, fmt, output)
    _summary(outcome, _open_stream("stderr", 2))
    return EXIT_FINDINGS if outcome.findings or outcome.failed else EXIT_CLEAN


def _open_stream(name: str, fd: int) -> TextIO:
    """sys.stdout or sys.stderr, reopened on its file descriptor if the script closed it."""
    stream = getattr(sys, name)
    if stream is None or getattr(stream, "closed", False):
        stream = open(fd, "w", encoding="utf-8", errors="replace", closefd=False)  # noqa: SIM115
        setattr(sys, name, stream)
    return stream


def _write(findings: list, fmt: str, output: Optional[str]) -> None:
    from cglint.report import write_report

    with (open(output, "w", encoding="utf-8") if output else contextlib.nullcontext(_open_stream("stdout", 1))) as stream:
        write_report(findings, fmt=fmt, files_checked=1, stream=stream)


def _summary(outcome, stream: TextIO) -> None:
    print(f"cglint verify: {outcome.mode} mode, {len(outcome.graphs)} capture(s)", file=stream)
    for info in outcome.graphs:
        pool = f", pool {info.pool_bytes / 2**20:.1f} MiB" if info.pool_bytes else ""
        state = ("traced on the CPU" if outcome.mode.startswith("CPU") else "captured") if info.ok else "FAILED"
        print(f"  {info.site}: {state} in {info.capture_seconds * 1000:.1f} ms{pool}, {info.replays} replay(s)",
              file=stream)
    for note in outcome.notes:
        print(f"  note: {note}", file=stream)
    if outcome.failed:
        print(f"cglint verify: the script {outcome.status}", file=stream)
