"""Reading and parsing one file, turning every failure into a diagnostic instead of a crash."""
from __future__ import annotations

import ast
import io
import tokenize
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Optional, Union

if TYPE_CHECKING:
    import libcst as cst



@dataclass
class SourceError:
    """Why a file could not be read (CG001) or parsed (CG002)."""

    code: str
    message: str
    line: int = 1
    column: int = 1


@dataclass
class SourceFile:
    path: Path
    display: str  # the path as reported to the user
    text: str

    @property
    def lines(self) -> list[str]:
        return self.text.splitlines()


def read_bytes(path: Path) -> Union[bytes, SourceError]:
    try:
        return path.read_bytes()
    except OSError as exc:
        return SourceError("CG001", f"cannot read file: {exc.strerror or exc}")


def decode(data: bytes) -> Union[str, SourceError]:
    """Decode as Python does: a BOM or a coding cookie, else UTF-8."""
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    except SyntaxError as exc:
        return SourceError("CG001", f"cannot decode file: {exc.msg}")
    try:
        text = data.decode(encoding)
    except (UnicodeDecodeError, LookupError) as exc:
        return SourceError("CG001", f"cannot decode file as {encoding}: {exc}")
    if text.startswith("\ufeff"):
        text = text[1:]
    if "\x00" in text:
        return SourceError("CG001", "cannot decode file: it contains a null byte")
    return text


def parse(text: str) -> Union["cst.Module", SourceError]:
    import libcst as cst  # loaded only for files that need it

    try:
        return cst.parse_module(text)
    except cst.ParserSyntaxError as exc:
        return SourceError(
            "CG002", f"syntax error: {exc.message}", line=max(exc.raw_line, 1), column=exc.raw_column + 1
        )
    except (RecursionError, MemoryError):
        return SourceError("CG002", "file is too deeply nested to parse")
    except Exception as exc:  # noqa: BLE001 - libcst raises assorted errors on odd input
        return SourceError("CG002", f"cannot parse file: {exc}")


def syntax_check(text: str) -> Optional[SourceError]:
    """A cheap syntax check (CPython's parser) for files that are never parsed with libcst."""
    try:
        compile(text, "<file>", "exec", ast.PyCF_ONLY_AST, dont_inherit=True)
        return None
    except SyntaxError as exc:
        error = SourceError("CG002", f"syntax error: {exc.msg}", line=max(exc.lineno or 1, 1), column=max(exc.offset or 1, 1))
    except (ValueError, RecursionError, MemoryError) as exc:
        error = SourceError("CG002", f"cannot parse file: {exc}")
    # The running Python may be older than the file's syntax (3.12 `type` statements):
    # libcst, which knows newer grammars, has the final word; CPython places errors better.
    return error if isinstance(parse(text), SourceError) else None


def load(path: Path, display: str) -> Union[SourceFile, SourceError]:
    data = read_bytes(path)
    if isinstance(data, SourceError):
        return data
    text = decode(data)
    if isinstance(text, SourceError):
        return text
    return SourceFile(path, display, text)


def line_at(text: str, line: int) -> Optional[str]:
    lines = text.splitlines()
    return lines[line - 1] if 0 < line <= len(lines) else None
