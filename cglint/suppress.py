"""Suppression comments: `# noqa: CG101`, `# cglint: ignore[CG101]`, and `# cglint: skip-file`."""
from __future__ import annotations

import re
from functools import lru_cache
from typing import Optional

_NOQA = re.compile(r"#\s*noqa(?::\s*(?P<codes>[A-Z]+[0-9]*(?:[\s,]+[A-Z]+[0-9]*)*))?", re.IGNORECASE)
_IGNORE = re.compile(r"#\s*cglint:\s*ignore(?:\[(?P<codes>[^\]]*)\])?")
_SKIP_FILE = re.compile(r"^\s*#\s*cglint:\s*skip-file\b", re.MULTILINE)


def skips_file(text: str) -> bool:
    return _SKIP_FILE.search(text) is not None


@lru_cache(maxsize=4096)
def codes_on_line(line: str) -> Optional[frozenset]:
    """None if the line suppresses nothing; an empty set if it suppresses everything."""
    if "#" not in line:
        return None
    found: Optional[set] = None
    for pattern in (_NOQA, _IGNORE):
        for match in pattern.finditer(line):
            codes = match.group("codes")
            if not codes:
                return frozenset()
            found = (found or set()) | {c.strip().upper() for c in re.split(r"[\s,]+", codes) if c.strip()}
    return frozenset(found) if found is not None else None


def is_suppressed(code: str, lines: list) -> bool:
    """Whether a suppression comment on any of `lines` covers `code` (exact code or a prefix)."""
    for line in lines:
        codes = codes_on_line(line)
        if codes is None:
            continue
        if not codes or any(code.startswith(c) for c in codes):
            return True
    return False
