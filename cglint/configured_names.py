"""CG003: `captured` and `capture-functions` entries that name nothing in the checked files.

A misspelt entry silently turns off every finding it was meant to enable, so the user is told
which entry, where it is written, and the closest names the code defines.
"""
from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path
from typing import Callable, Optional

from cglint import catalogue
from cglint.findings import Finding

_DEFINITION = re.compile(r"^([ \t]*)(?:async[ \t]+)?(def|class)[ \t]+(\w+)", re.M)
_SUGGESTIONS = 3  # closest names a CG003 message lists (difflib's own default)


def defined_names(texts: Iterable[str]) -> set[str]:
    """Function, class and `Class.method` names defined in the texts, read without parsing
    (the files a misspelt entry would have named were never parsed)."""
    names: set[str] = set()
    for text in texts:
        classes: list[tuple[int, str]] = []  # (indent, name) of the enclosing classes
        for match in _DEFINITION.finditer(text):
            indent, kind, name = len(match.group(1).expandtabs()), match.group(2), match.group(3)
            while classes and classes[-1][0] >= indent:
                classes.pop()
            names.add(".".join([c for _, c in classes] + [name]))
            names.add(name)
            if kind == "class":
                classes.append((indent, name))
    return names


def diagnostics(
    unresolved: list[tuple[str, str]], config_source: Optional[Path], texts: Iterable[str], display: Callable[[Path], str]
) -> list[Finding]:
    if not unresolved:
        return []
    import difflib  # only when an entry names nothing: every other run starts without it

    known = sorted(defined_names(texts))
    config_text = _read(config_source)
    path = display(config_source) if config_source else "<configuration>"
    found = []
    for key, name in unresolved:
        line, column = _position(config_text, name)
        close = difflib.get_close_matches(name, known, n=_SUGGESTIONS, cutoff=0.6)
        hint = f"; closest defined: {', '.join(f'`{c}`' for c in close)}" if close else ""
        message = f"`{key}` entry `{name}` names no function defined or called in the checked files{hint}"
        found.append(Finding(path, line, column, line, column + len(name) + 2, "CG003", "internal", catalogue.diagnostic_severity("CG003"), message, ""))
    return found


def _read(path: Optional[Path]) -> str:
    try:
        return path.read_text("utf-8") if path else ""
    except (OSError, UnicodeDecodeError):
        return ""


def _position(text: str, name: str) -> tuple[int, int]:
    """Where the entry is written in the configuration file (its quoted name), else line 1."""
    for quote in ('"', "'"):
        at = text.find(f"{quote}{name}{quote}")
        if at >= 0:
            line = text.count("\n", 0, at) + 1
            return line, at - (text.rfind("\n", 0, at) + 1) + 1
    return 1, 1
