"""Reading and parsing one file, turning every failure into a diagnostic instead of a crash."""
from __future__ import annotations

import ast
import codecs
import errno
import io
import os
import re
import stat
import sys
import tokenize
import warnings
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
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
    """The file's bytes. Only a regular file is read: opening a named pipe waits for a writer
    (forever), so files are opened without waiting and anything else is refused."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0))
    except OSError as exc:
        return _read_error(path, exc)
    try:
        mode = os.fstat(fd).st_mode
    except OSError as exc:
        os.close(fd)
        return _read_error(path, exc)
    if not stat.S_ISREG(mode):
        os.close(fd)
        return SourceError("CG001", f"cannot read file: {_not_regular(mode)}")
    try:
        with open(fd, "rb") as handle:
            return handle.read()
    except OSError as exc:
        return _read_error(path, exc)


def _not_regular(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "it is a directory"
    if stat.S_ISFIFO(mode):
        return "it is a named pipe (FIFO), not a regular file"
    if stat.S_ISSOCK(mode):
        return "it is a socket, not a regular file"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "it is a device, not a regular file"
    return "it is not a regular file"


def _read_error(path: Path, exc: OSError) -> SourceError:
    if exc.errno == errno.ELOOP:
        return SourceError("CG001", "cannot read file: it is a symbolic link loop")
    if path.is_symlink() and not path.exists():
        try:
            target = os.readlink(path)
        except OSError:
            target = "?"
        return SourceError("CG001", f"cannot read file: broken symbolic link (it points to {target!r}, which does not exist)")
    if isinstance(exc, IsADirectoryError):
        return SourceError("CG001", "cannot read file: it is a directory")
    return SourceError("CG001", f"cannot read file: {exc.strerror or exc}")


def decode(data: bytes) -> Union[str, SourceError]:
    """Decode as Python does: a BOM or a coding cookie, else UTF-8."""
    try:
        encoding, first_lines = tokenize.detect_encoding(io.BytesIO(data).readline)
    except SyntaxError as exc:
        return _encoding_error(data, exc.msg)
    try:
        text = data.decode(encoding)
    except UnicodeDecodeError as exc:
        offset = exc.start
        if codecs.lookup(encoding).name == "utf-8-sig":  # its offsets do not count the BOM
            try:
                data.decode("utf-8")
            except UnicodeDecodeError as plain:
                offset = plain.start
        return _invalid_byte(data, offset, encoding, declared=any(_CODING.match(line) for line in first_lines))
    except LookupError as exc:
        return SourceError("CG001", f"cannot decode file as {encoding}: {exc}")
    if text.startswith("\ufeff"):
        text = text[1:]
    if "\x00" in text:
        line, column = _position(text, text.index("\x00"))
        return SourceError("CG001", "cannot decode file: it contains a null byte (Python refuses such source files)", line, column)
    return text


def _position(data: Union[bytes, str], offset: int) -> tuple[int, int]:
    """1-based (line, column) of an offset into the file."""
    newline = b"\n" if isinstance(data, bytes) else "\n"
    line = data.count(newline, 0, offset) + 1  # type: ignore[arg-type]
    column = offset - (data.rfind(newline, 0, offset) + 1) + 1  # type: ignore[arg-type]
    return line, column


def _encoding_error(data: bytes, reason: str) -> SourceError:
    """Clearer words for what tokenize.detect_encoding refuses."""
    if reason.startswith("unknown encoding"):
        return SourceError("CG001", f"cannot decode file: its coding declaration names an {reason}")
    if reason.startswith("encoding problem") and data.startswith(codecs.BOM_UTF8):
        return SourceError("CG001", "cannot decode file: it starts with a UTF-8 byte-order mark but declares another encoding")
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as exc:
        return _invalid_byte(data, exc.start, "utf-8", declared=False)
    return SourceError("CG001", f"cannot decode file: {reason}")


# tokenize's own pattern for a coding declaration (PEP 263).
_CODING = re.compile(rb"^[ \t\f]*#.*?coding[:=][ \t]*([-\w.]+)", re.ASCII)


def _invalid_byte(data: bytes, offset: int, encoding: str, declared: bool) -> SourceError:
    """One wording for a byte the file's encoding refuses, wherever in the file it is (in
    the first two lines tokenize refuses it while looking for a declaration, later the codec
    does): UTF-8 unless a coding declaration names another encoding."""
    line, column = _position(data, offset)
    byte = f"byte 0x{data[offset]:02x}"
    name = "UTF-8" if codecs.lookup(encoding).name in ("utf-8", "utf-8-sig") else encoding
    if declared:
        why = f"cannot decode file: invalid {name} ({byte}), the encoding its coding declaration names"
    elif data.startswith(codecs.BOM_UTF8):
        why = f"cannot decode file: invalid UTF-8 ({byte}) after a UTF-8 byte-order mark"
    else:
        why = f"cannot decode file: invalid UTF-8 ({byte}) and no coding declaration"
    return SourceError("CG001", why, line, column)


def parse(text: str, cpython_accepts: bool = False) -> Union["cst.Module", SourceError]:
    """libcst's tree of `text`. `cpython_accepts`: CPython's parser has accepted the text
    (or the file it was cut from), so it cannot be nested too deeply."""
    import libcst as cst  # loaded only for files that need it

    refused = None if cpython_accepts else _cpython_refusal(text)
    if refused is not None and _nested_too_deep(refused):
        return refused
    try:
        return cst.parse_module(text)
    except cst.ParserSyntaxError as exc:
        # CPython's message and position, as for the files only CPython checks; libcst's
        # own only where CPython accepts the text.
        reason = _LIBCST_PREFIX.sub("", exc.message)
        return refused or SourceError("CG002", f"syntax error: {reason}", line=max(exc.raw_line, 1), column=exc.raw_column + 1)
    except (RecursionError, MemoryError):
        return SourceError("CG002", "file is too deeply nested to parse")
    except Exception as exc:  # noqa: BLE001 - libcst raises assorted errors on odd input
        return refused or SourceError("CG002", f"cannot parse file: {exc}")


# libcst words its messages "parser error: error at 7:2: expected ...", the position repeated.
_LIBCST_PREFIX = re.compile(r"^(?:parser|tokenizer) error: (?:error at \d+:\d+: )?")

# CPython's errors for nesting beyond what its parser supports.
_NESTING = ("too many nested parentheses", "too many levels of indentation", "too many indentation levels", "too complex")
_TOO_DEEP = "file is nested too deeply to parse (Python's own parser refuses it too)"


def _cpython_refusal(text: str) -> Optional[SourceError]:
    """Why CPython's parser refuses `text`, or None. Costs about a tenth of a libcst parse."""
    tree = cpython_tree(text)
    return tree if isinstance(tree, SourceError) else None


def _nested_too_deep(error: SourceError) -> bool:
    """Nesting beyond what CPython's parser accepts. libcst's native parser has no such
    limits: thousands of nested brackets overflow its stack and kill the process, and long
    chains of unary operators exhaust memory. Such input never reaches it."""
    return error.message == _TOO_DEEP or any(words in error.message for words in _NESTING)


def cpython_tree(text: str) -> Union[ast.Module, SourceError]:
    """The `ast` tree of `text`, parsed with CPython's default limits whatever the
    recursion limit of the caller: a tree it gives is safe to hand to libcst."""
    # CPython scales its parser's depth limit with the recursion limit, which the checker
    # raises to walk deep trees: measure with the default headroom from the current depth.
    limit = sys.getrecursionlimit()
    wanted = _frame_depth() + _DEFAULT_HEADROOM
    try:
        if limit > wanted:
            sys.setrecursionlimit(wanted)
        return _compiled(text, ast.PyCF_ONLY_AST)
    finally:
        sys.setrecursionlimit(limit)


def _compiled(text: str, flags: int):
    """CPython's compile of `text` (an `ast` tree with PyCF_ONLY_AST), or why it failed."""
    try:
        with warnings.catch_warnings():  # invalid escapes and the like are not ours to report
            warnings.simplefilter("ignore")
            return compile(text, "<file>", "exec", flags, dont_inherit=True)
    except (RecursionError, MemoryError):
        return SourceError("CG002", _TOO_DEEP)
    except SyntaxError as exc:
        return SourceError("CG002", f"syntax error: {exc.msg}", line=max(exc.lineno or 1, 1), column=max(exc.offset or 1, 1))
    except ValueError as exc:  # null bytes
        return SourceError("CG002", f"cannot parse file: {exc}")


_DEFAULT_HEADROOM = 1000  # Python's default recursion limit


def _frame_depth() -> int:
    frame: Optional[FrameType] = sys._getframe()
    depth = 0
    while frame is not None:
        frame, depth = frame.f_back, depth + 1
    return depth


def syntax_check(text: str) -> Optional[SourceError]:
    """A cheap syntax check (CPython's parser) for files that are never parsed with libcst."""
    # Bytecode first, a fifth faster than building `ast` objects; it refuses a little more
    # (`return` outside a function is no parse error), so a refusal is asked of `ast` again.
    if not isinstance(_compiled(text, 0), SourceError):
        return None
    error = _compiled(text, ast.PyCF_ONLY_AST)
    if not isinstance(error, SourceError):
        return None
    if _nested_too_deep(error):
        return error  # never handed to libcst
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
