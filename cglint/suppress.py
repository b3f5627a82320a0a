"""Suppression comments: `# noqa: CG101`, `# cglint: ignore[CG101]`, and `# cglint: skip-file`."""
from __future__ import annotations

import re
from functools import lru_cache
from typing import Optional

_NOQA = re.compile(r"#\s*noqa(?::\s*(?P<codes>[A-Z]+[0-9]*(?:[\s,]+[A-Z]+[0-9]*)*))?", re.IGNORECASE)
_IGNORE = re.compile(r"#\s*cglint:\s*ignore(?:\[(?P<codes>[^\]]*)\])?")
_SKIP_FILE = re.compile(r"^\s*#\s*cglint:\s*skip-file\b", re.MULTILINE)


def skips_file(text: str) -> bool:
    return "cglint" in text and _SKIP_FILE.search(text) is not None  # the regex is slow on large files


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


def _comment_lines(text: str) -> dict[int, Optional[int]]:
    """Lines that can end with a comment (not inside a string, not continued with a backslash),
    mapped to the column of the comment they already have."""
    import io
    import tokenize

    found: dict[int, Optional[int]] = {}
    try:
        for token in tokenize.generate_tokens(io.StringIO(text).readline):
            if token.type == tokenize.COMMENT:
                found[token.start[0]] = token.start[1]
            elif token.type in (tokenize.NEWLINE, tokenize.NL):
                found.setdefault(token.start[0], None)
    except (tokenize.TokenError, SyntaxError):
        pass
    return found


def with_noqa(text: str, wanted: list) -> tuple[str, int]:
    """`text` with `# noqa: CODE` comments for `wanted`, a list of (code, first line, last line):
    on the first line that can take a comment (the checker reads the first and the last),
    merged into a `# noqa: ...` already there. Returns the text and how many were added."""
    lines = text.splitlines(keepends=True)
    comments = _comment_lines(text)
    add: dict[int, list[str]] = {}
    for code, first, last in wanted:
        for line in (first, last):
            if line in comments and 0 < line <= len(lines):
                if code not in add.setdefault(line, []):
                    add[line].append(code)
                break
    added = 0
    for number, codes in add.items():
        raw = lines[number - 1]
        body = raw.rstrip("\r\n")
        ending = raw[len(body):]
        existing = codes_on_line(body)
        codes = [c for c in codes if existing is None or (existing and not any(c.startswith(e) for e in existing))]
        if not codes:
            continue
        column = comments[number]
        match = _NOQA.search(body, column) if column is not None else None
        if match is not None and match.group("codes"):
            end = match.end("codes")
            body = f"{body[:end]}, {', '.join(codes)}{body[end:]}"
        else:
            body = f"{body.rstrip()}  # noqa: {', '.join(codes)}"
        lines[number - 1] = body + ending
        added += len(codes)
    return "".join(lines), added
