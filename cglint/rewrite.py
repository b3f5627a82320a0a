"""Writing files back (fixes, suppressions, baselines): atomically, and without changing what
the user did not ask to change: the encoding and its BOM, the line endings (they are part of
the text), the permissions, and the file a symbolic link points to."""
from __future__ import annotations

import io
import os
import stat
import tempfile
import tokenize
from pathlib import Path

from cglint import source


class FileChanged(Exception):
    """The file on disk is no longer the text the change was computed from."""


def _replace(target: Path, data: bytes, mode: int) -> None:
    fd, temp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".cglint-tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(temp, mode)
        os.replace(temp, target)
    except BaseException:
        try:
            os.unlink(temp)
        except OSError:
            pass
        raise


def replace_text(path: Path, text: str, expected: str) -> None:
    """Write `text` over the Python source file `path`, which must still hold `expected`."""
    target = Path(os.path.realpath(path))
    data = target.read_bytes()
    if source.decode(data) != expected:
        raise FileChanged(f"{path} changed while cglint was working on it; it was left as it is")
    encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)  # "utf-8-sig" keeps the BOM
    _replace(target, text.encode(encoding), stat.S_IMODE(target.stat().st_mode))


def write_new(path: Path, text: str) -> None:
    """Write a file cglint owns (a baseline) atomically, as UTF-8."""
    target = Path(os.path.realpath(path))
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        mode = stat.S_IMODE(target.stat().st_mode)
    except FileNotFoundError:
        umask = os.umask(0)
        os.umask(umask)
        mode = 0o666 & ~umask
    _replace(target, text.encode("utf-8"), mode)
