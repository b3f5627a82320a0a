"""Human output: each finding with its source line, a caret underline and the capture chain."""
from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Optional, TextIO

from cglint.findings import Finding
from cglint.reach import Coverage, coverage_phrase

_STYLE = {"error": "bold red", "warning": "yellow", "info": "cyan"}
# Related locations shown under a finding; an aggregated finding can hold a hundred: five
# keep each finding to a few lines, and the line after them says `--format json` lists all.
_RELATED_SHOWN = 5


def _file_lines(path: str) -> tuple[str, ...]:
    from cglint.source import decode, read_bytes

    data = read_bytes(Path(path))  # never waits on a named pipe
    text = decode(data) if isinstance(data, bytes) else None
    return tuple(text.splitlines()) if isinstance(text, str) else ()


def _source_line(finding: Finding, files: dict) -> Optional[str]:
    """The finding's line, read once per report (files change between runs in one process: --fix, editors)."""
    if finding.path not in files:
        files[finding.path] = _file_lines(finding.path)
    lines = files[finding.path]
    return lines[finding.line - 1] if 0 < finding.line <= len(lines) else None


def _console(stream: TextIO, color: bool):
    from rich.console import Console

    return Console(file=stream, force_terminal=color, no_color=not color, highlight=False, soft_wrap=True, emoji=False)


def write_text(findings: list[Finding], files_checked: int, stream: TextIO, *, statistics: bool = False, color: bool = False, coverage: Optional[Coverage] = None) -> None:
    if not findings:  # the common pre-commit case: no need to load rich
        stream.write(summary(findings, files_checked, coverage) + "\n")
        return
    from rich.markup import escape
    from rich.text import Text

    console = _console(stream, color)
    files: dict[str, tuple[str, ...]] = {}
    for f in findings:
        header = Text()
        header.append(f"{f.path}:{f.line}:{f.column}: ", style="bold")
        header.append(f.code, style=_STYLE.get(f.severity, ""))
        header.append(f" [{f.severity}] ", style=_STYLE.get(f.severity, ""))
        header.append(f.message)
        console.print(header)
        line = _source_line(f, files)
        if line is not None:
            gutter = " " * len(str(f.line))
            start = max(f.column - 1, 0)
            end = f.end_column - 1 if f.end_line == f.line else len(line)
            width = max(end - start, 1)
            console.print(f"{gutter} |", style="blue")
            console.print(Text(f"{f.line} | ", style="blue") + Text(line.expandtabs(1)))
            console.print(Text(f"{gutter} | ", style="blue") + Text(" " * start + "^" * width, style=_STYLE.get(f.severity, "")))
        if f.trace:
            console.print(f"{' ' * len(str(f.line))} = captured: " + escape(" -> ".join(f.trace)))
        for related in f.related[:_RELATED_SHOWN]:
            console.print(f"{' ' * len(str(f.line))} = see: {related.path}:{related.line}:{related.column}: " + escape(related.message))
        if len(f.related) > _RELATED_SHOWN:
            console.print(f"{' ' * len(str(f.line))} = see: {len(f.related) - _RELATED_SHOWN} more (--format json lists them all)")
        if f.fix_hint:
            console.print(f"{' ' * len(str(f.line))} = help: " + escape(f.fix_hint))
        console.print()
    if statistics:
        write_statistics(findings, console)
    console.print(summary(findings, files_checked, coverage))


def write_concise(findings: list[Finding], files_checked: int, stream: TextIO, statistics: bool = False, coverage: Optional[Coverage] = None, color: bool = False) -> None:
    for f in findings:
        location, code = f"{f.path}:{f.line}:{f.column}:", f"{f.code} [{f.severity}]"
        if color:  # the styles of the text format, without loading rich for one line each
            location, code = _ansi(location, "bold"), _ansi(code, _STYLE.get(f.severity, ""))
        stream.write(f"{location} {code} {f.message}\n")
    if statistics:
        write_statistics(findings, _console(stream, color))
    stream.write(summary(findings, files_checked, coverage) + "\n")


_ANSI = {"bold": "1", "bold red": "1;31", "yellow": "33", "cyan": "36"}


def _ansi(text: str, style: str) -> str:
    return f"\x1b[{_ANSI[style]}m{text}\x1b[0m" if style in _ANSI else text


def write_statistics(findings: list[Finding], console) -> None:
    counts = Counter((f.code, f.severity, f.category) for f in findings)
    for (code, severity, category), count in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])):
        console.print(f"{count:5d}  {code}  {severity:<7}  {category}")
    if counts:
        console.print()


def summary(findings: list[Finding], files_checked: int, coverage: Optional[Coverage] = None) -> str:
    """The closing line; it says how much was followed, so that a pass is never read as
    "checked" where no capture was found or calls were left unfollowed."""
    files = f"{files_checked} file{'s' if files_checked != 1 else ''} checked"
    if coverage is not None:
        files = f"{files}; {coverage_phrase(coverage)}"
    if not findings:
        if files_checked == 0:
            return "No Python files found: nothing was checked."
        if coverage is not None and not coverage.captures:
            checked = f"{files_checked} file{'s' if files_checked != 1 else ''} checked"
            return f"No capture found in {checked}: no code was checked for CUDA-graph hazards."
        return f"All checks passed ({files})."
    severities = Counter(f.severity for f in findings)
    parts = [f"{severities[s]} {s}{'s' if severities[s] != 1 else ''}" for s in ("error", "warning", "info") if severities[s]]
    paths = len({f.path for f in findings})
    return f"Found {len(findings)} finding{'s' if len(findings) != 1 else ''} ({', '.join(parts)}) in {paths} file{'s' if paths != 1 else ''}; {files}."
