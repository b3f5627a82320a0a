"""Suppression comments: `# noqa: CG101`, `# cglint: ignore[CG101]`, and `# cglint: skip-file`."""
from __future__ import annotations

import re
from functools import cache, lru_cache
from typing import Optional

# Codes (CG101), prefixes (CG1) and, as `--select` takes them, category names (sync, cpu-rng).
_NOQA = re.compile(r"#\s*noqa(?::\s*(?P<codes>[A-Z][\w-]*(?:[\s,]+[A-Z][\w-]*)*))?", re.IGNORECASE)
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


@cache
def _category(code: str) -> Optional[str]:
    from cglint import catalogue

    entry = catalogue.index().get(code)
    return entry[1].upper() if entry else None


def covers(selector: str, code: str) -> bool:
    """Whether a code named in a suppression comment (upper-cased) covers `code`: the code
    itself, a prefix of it, or its category's name."""
    return code.startswith(selector) or selector == _category(code)


def is_suppressed(code: str, lines: list) -> bool:
    """Whether a suppression comment on any of `lines` covers `code` (exact code, a prefix or
    its category)."""
    for line in lines:
        codes = codes_on_line(line)
        if codes is None:
            continue
        if not codes or any(covers(c, code) for c in codes):
            return True
    return False


def _tokens(text: str):
    """The tokens of `text`, up to where the tokenizer gives up (the rest has no comments)."""
    import io
    import tokenize

    try:
        yield from tokenize.generate_tokens(io.StringIO(text).readline)
    except (tokenize.TokenError, SyntaxError):
        return


def _layout(text: str) -> tuple[dict[int, Optional[int]], dict[int, int]]:
    """(comments, ends). `comments`: the lines that can end with a comment (not inside a
    string or an f-string's replacement field, not continued with a backslash), mapped to the
    column of the comment they already have. `ends`: for each line of a logical line that
    spans several (brackets, a backslash, a multi-line string), the line it ends on."""
    import tokenize

    fstring_start = getattr(tokenize, "FSTRING_START", None)  # Python 3.12+
    fstring_end = getattr(tokenize, "FSTRING_END", None)
    comments: dict[int, Optional[int]] = {}
    ends: dict[int, int] = {}
    first: Optional[int] = None  # the first line of the logical line being read
    fstrings = 0  # f-strings open around the current token (3.12 tokenizes their insides)
    for token in _tokens(text):
        kind, line = token.type, token.start[0]
        if kind == fstring_start:
            fstrings += 1
        elif kind == fstring_end:
            fstrings -= 1
        if kind == tokenize.COMMENT:
            if not fstrings:
                comments[line] = token.start[1]
        elif kind == tokenize.NL:
            if not fstrings:
                comments.setdefault(line, None)
        elif kind == tokenize.NEWLINE:
            comments.setdefault(line, None)
            if first is not None and first < line:
                ends.update((number, line) for number in range(first, line))
            first = None
        elif kind not in (tokenize.INDENT, tokenize.DEDENT, tokenize.ENCODING, tokenize.ENDMARKER) and first is None:
            first = line
    return comments, ends


def logical_ends(text: str) -> dict[int, int]:
    """For each line of a logical line that spans several lines, the last line of it: a
    comment there covers findings on all of its lines, as flake8 reads a `# noqa` after a
    multi-line string (Python allows no comment on a line that ends inside a string or
    with a backslash)."""
    return _layout(text)[1]


def with_noqa(text: str, wanted: list) -> tuple[str, int]:
    """`text` with `# noqa: CODE` comments for `wanted`, a list of (code, first line, last line):
    on the first or last line of the finding where Python allows a comment there, else at the
    end of the logical line that holds its first line (the checker reads all three), merged
    into a `# noqa: ...` already there. Returns the text and how many were added."""
    lines = text.splitlines(keepends=True)
    comments, ends = _layout(text)
    add: dict[int, list[str]] = {}
    for code, first, last in wanted:
        for line in (first, last, ends.get(first, first)):
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
        codes = [c for c in codes if existing is None or (existing and not any(covers(e, c) for e in existing))]
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
