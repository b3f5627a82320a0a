"""The result cache: a run whose inputs have not changed is answered from disk.

A finding in one file can depend on another (a call from a region reaches it), so a
result is keyed by every file it read: the checked files (their paths and content
hashes, plus cglint's version, the configuration and the selected codes form the key)
and the other modules the engine parsed on demand (recorded with their hashes and
re-hashed on lookup); the modules it looked for and did not find must still not exist.
Clean and dirty results are both stored.

When files changed, the last run over the same files and settings (its footprint, see
footprint.py) is the next resort: if none of the changed files was read by the engine
or answers its searches differently, the engine's findings still hold, and only the
changed files' own read and syntax errors are found again (check.py decides). The
cache is an optimisation only: unreadable, corrupt or read-only cache folders are
ignored, never an error.
"""
from __future__ import annotations

import hashlib
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Iterable, NamedTuple, Optional

from cglint import __version__
from cglint.findings import Finding
from cglint.footprint import Footprint
from cglint.reach import Coverage

CACHE_DIR = ".cglint_cache"
# Results kept, newest first: every edit makes a new run key, so this is how far back an
# undo finds its result; 64 covers an editing session and keeps the folder small.
_MAX_ENTRIES = 64


def digest(data: bytes) -> str:
    return hashlib.blake2b(data, digest_size=16).hexdigest()


def file_digest(path: Path) -> Optional[str]:
    try:
        return digest(path.read_bytes())
    except OSError:
        return None


# A digest recorded with the file's size, times and inode is used again while they are
# unchanged (as git's index does): a warm run over torch's 2,285 files then reads none of
# them. Times within this much of the recording are not trusted: a second edit in the same
# tick of a coarse file system clock would keep them.
_RACY_NS = 2_000_000_000
_STATS = "file-stats.data"


def file_digests(folder: Path, paths: Iterable[Path]) -> dict[str, Optional[str]]:
    """Content digests by absolute path, computed only for files changed since recorded."""
    try:
        known = json.loads((folder / _STATS).read_text("utf-8"))
        if not isinstance(known, dict):
            known = {}
    except (OSError, ValueError):
        known = {}
    now = time.time_ns()
    digests: dict[str, Optional[str]] = {}
    changed = False
    for path in paths:
        given = os.path.abspath(path)
        try:
            st = os.stat(given)
        except OSError:
            digests[given] = None
            continue
        signature = [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino]
        entry = known.get(given)
        # [size, mtime, ctime, inode, digest, when recorded]
        if isinstance(entry, list) and len(entry) == 6 and entry[:4] == signature and max(signature[1:3]) < entry[5] - _RACY_NS:
            digests[given] = entry[4]
            continue
        digests[given] = file_digest(path)
        if entry != [*signature, digests[given], now]:
            known[given] = [*signature, digests[given], now]
            changed = True
    if changed:
        _write(folder, _STATS, known, suffix="")
    return digests


def _tool_signature() -> str:
    """cglint's version and the state of its own sources, so that an edited or
    reinstalled checker (an editable install keeps its version) never reuses old results."""
    import cglint
    import cglint.rules

    stamps = []
    folders = [Path(f) for package in (cglint, cglint.rules) for f in getattr(package, "__path__", [])]
    for folder in folders + [Path(cglint.__file__).parent / sub for sub in ("engine", "report")]:
        for entry in os.scandir(folder) if folder.is_dir() else ():
            if entry.name.endswith((".py", ".toml", ".json")):
                stat = entry.stat()
                stamps.append(f"{entry.path}:{stat.st_mtime_ns}:{stat.st_size}")
    return __version__ + "\0" + "\0".join(sorted(stamps))


def run_key(digests: dict[str, Optional[str]], settings: object) -> str:
    """The key of a run over these files (path -> content digest) with these settings."""
    h = hashlib.blake2b(digest_size=16)
    h.update(f"{_tool_signature()}\0{json.dumps(settings, sort_keys=True, default=str)}\0".encode())
    for path, file_hash in digests.items():
        h.update(f"{path}\0{file_hash}\0".encode())
    return h.hexdigest()


def base_key(paths: Iterable[str], settings: object) -> str:
    """The key of the runs over these files, whatever their contents."""
    return "base-" + run_key(dict.fromkeys(paths, ""), settings)


def load(folder: Path, key: str) -> Optional[tuple[list[Finding], int, Coverage]]:
    try:
        data = json.loads((folder / f"{key}.json").read_text("utf-8"))
        if _stale(data["deps"], data["absent"]):
            return None
        return [Finding.from_json(f) for f in data["findings"]], int(data["files_checked"]), Coverage.from_json(data["coverage"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def store(folder: Path, key: str, findings: list[Finding], files_checked: int, deps: Iterable[Path], absent: list[str], coverage: Coverage) -> None:
    _write(folder, key, {
        "deps": {str(p): file_digest(p) for p in deps},
        "absent": absent,
        "findings": [f.to_json() for f in findings],
        "files_checked": files_checked,
        "coverage": coverage.to_json(),
    })


class BaseRun(NamedTuple):
    """The last run over some files and settings, whatever their contents."""

    footprint: Footprint
    digests: dict[str, Optional[str]]  # the checked files' content digests, by absolute path
    deps: list[Path]  # the other files the engine read


def store_base(folder: Path, key: str, digests: dict[str, Optional[str]], footprint: Footprint, deps: Iterable[Path]) -> None:
    """The footprint of a run with the digests of the files it checked and of the other
    files the engine read."""
    _write(folder, key, {"digests": digests, "deps": {str(p): file_digest(p) for p in deps}, "footprint": footprint.to_json()})


def load_base(folder: Path, key: str) -> Optional[BaseRun]:
    """A stored footprint whose engine-read files outside the checked ones are unchanged."""
    try:
        data = json.loads((folder / f"{key}.json").read_text("utf-8"))
        footprint = Footprint.from_json(data["footprint"])
        if _stale(data["deps"], footprint.absent):
            return None
        return BaseRun(footprint, dict(data["digests"]), [Path(p) for p in data["deps"]])
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def _stale(deps: dict[str, Optional[str]], absent: list[str]) -> bool:
    """A module the engine read outside the checked files changed, or one it looked for
    and did not find now exists."""
    if any(file_digest(Path(path)) != expected for path, expected in deps.items()):
        return True
    return any(os.path.lexists(path) for path in absent)


def _write(folder: Path, key: str, data: dict, suffix: str = ".json") -> None:
    try:
        folder.mkdir(parents=True, exist_ok=True)
        ignore = folder / ".gitignore"
        if not ignore.exists():
            ignore.write_text("# Created by cglint.\n*\n")
        fd, temporary = tempfile.mkstemp(dir=folder, suffix=".tmp")
        with os.fdopen(fd, "w", encoding="utf-8") as stream:
            json.dump(data, stream)
        os.replace(temporary, folder / f"{key}{suffix}")  # atomic: concurrent runs never see half a file
        _prune(folder)
    except OSError:
        pass


def _prune(folder: Path) -> None:
    entries = sorted(folder.glob("*.json"), key=lambda p: p.stat().st_mtime, reverse=True)
    for stale in entries[_MAX_ENTRIES:]:
        try:
            stale.unlink()
        except OSError:
            pass
