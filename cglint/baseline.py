"""Baselines: record the findings a project has today so that only new ones fail.

`cglint check --baseline FILE` reports (and fails on) findings that are not in FILE;
`--update-baseline` writes FILE from the current findings. A finding is keyed by its file,
its code, the text of its line (indentation, spacing and trailing comment dropped) and its
rank among the findings with the same three, never by line or column numbers: lines added
or removed elsewhere in the file, re-indentation and comments keep the baseline valid.
"""
from __future__ import annotations

import io
import json
import os
import tokenize
from collections import Counter
from pathlib import Path
from typing import Callable, Iterable, Optional

from cglint import __version__
from cglint.findings import Finding

FORMAT_VERSION = 1  # the layout of a baseline file, written as its `cglint_baseline` key
Key = tuple[str, str, str, int]  # (path, code, line text, occurrence)


class BaselineError(Exception):
    pass


def normalize(line: str) -> str:
    """A source line without its indentation, runs of spaces, or a trailing comment."""
    return " ".join(line.split())


def code_lines(text: str) -> list[str]:
    """Each line of `text` with its comment removed (by the tokenizer, so `#` in strings stays)."""
    lines = text.splitlines()
    try:
        for token in tokenize.generate_tokens(io.StringIO(text).readline):
            if token.type == tokenize.COMMENT and token.start[0] <= len(lines):
                row, col = token.start
                lines[row - 1] = lines[row - 1][:col]
    except (tokenize.TokenError, SyntaxError):
        pass  # a file that does not tokenize keeps its comments in the key
    return [normalize(line) for line in lines]


def _disk_lines(path: str) -> list[str]:
    from cglint import source

    data = source.read_bytes(Path(path))
    text = source.decode(data) if isinstance(data, bytes) else data
    return code_lines(text) if isinstance(text, str) else []


def keys(findings: Iterable[Finding], relative_to: Optional[Path] = None, lines: Optional[Callable[[str], list]] = None) -> list[Key]:
    """The key of each finding, in order. Paths are made relative to `relative_to` (the
    baseline's folder) when below it; `lines(path)` gives a file's normalized lines
    (default: read from disk)."""
    read: dict[str, list] = {}
    lines = lines or (lambda path: read[path] if path in read else read.setdefault(path, _disk_lines(path)))
    findings = list(findings)
    base = relative_to.resolve() if relative_to is not None else None
    seen: Counter = Counter()
    result: dict[int, Key] = {}
    for index in sorted(range(len(findings)), key=lambda i: findings[i].sort_key):
        f = findings[index]
        text = lines(f.path)
        line_text = text[f.line - 1] if 0 < f.line <= len(text) else ""
        stem = (_relative(f.path, base), f.code, line_text)
        result[index] = (*stem, seen[stem])
        seen[stem] += 1
    return [result[i] for i in range(len(findings))]


def _relative(path: str, base: Optional[Path]) -> str:
    if base is None:
        return Path(path).as_posix()
    try:
        return Path(os.path.abspath(path)).relative_to(base).as_posix()
    except ValueError:
        return Path(path).as_posix()


def load(path: Path) -> Counter:
    try:
        data = json.loads(path.read_text("utf-8"))
        entries = data["findings"]
        return Counter((e["path"], e["code"], e["line_text"], int(e["occurrence"])) for e in entries)
    except FileNotFoundError:
        raise BaselineError(f"{path}: baseline file not found (create it with --update-baseline)") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise BaselineError(f"{path}: cannot read baseline: {exc}") from None
    except (ValueError, KeyError, TypeError) as exc:
        raise BaselineError(f"{path}: not a cglint baseline file ({type(exc).__name__}: {exc})") from None


def write(path: Path, findings: list[Finding]) -> None:
    from cglint.rewrite import write_new

    entries = [
        {"path": k[0], "code": k[1], "line_text": k[2], "occurrence": k[3], "line": f.line, "message": f.message}
        for k, f in sorted(zip(keys(findings, path.parent), findings), key=lambda pair: (pair[0], pair[1].line))
    ]
    data = {"cglint_baseline": FORMAT_VERSION, "version": __version__, "findings": entries}
    write_new(path, json.dumps(data, indent=2, ensure_ascii=False) + "\n")


def new_findings(findings: list[Finding], path: Path) -> tuple[list[Finding], int]:
    """(the findings not in the baseline at `path`, how many were in it)."""
    known = load(path)
    new = []
    for key, finding in zip(keys(findings, path.parent), findings):
        if known[key] > 0:
            known[key] -= 1
        else:
            new.append(finding)
    return new, len(findings) - len(new)
