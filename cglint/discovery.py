"""Which files to check: Python files under the given paths, minus excluded patterns."""
from __future__ import annotations

import fnmatch
import os
import re
from functools import lru_cache
from pathlib import Path
from typing import Iterable


def resolved(path: Path) -> Path:
    """`path.resolve()`, or the absolute path where a symbolic link loop makes resolving fail.
    A path that is no symbolic link is its resolved folder plus its name: the folder is
    resolved once for all its files (a system call per component of every path otherwise)."""
    name = path.name
    if name in ("", ".", ".."):
        return _resolved(path)
    if path.is_symlink() and not _unreadable_link(path):
        return _resolved(path)
    # A file, or a link that leads nowhere, which is reported where it is, not at its target.
    folder = str(path.parent)
    return _resolved_folder(folder if os.path.isabs(folder) else os.path.join(os.getcwd(), folder)) / name


@lru_cache(maxsize=4096)
def _resolved_folder(folder: str) -> Path:
    return _resolved(Path(folder))


def forget_folders() -> None:
    """Resolve folders afresh (each run: a long-lived server sees folders move)."""
    _resolved_folder.cache_clear()
    _package_of.cache_clear()


def _resolved(path: Path) -> Path:
    try:
        return path.resolve()
    except (OSError, RuntimeError):
        return Path(os.path.abspath(path))


def _unreadable_link(path: Path) -> bool:
    """A symbolic link that leads nowhere (broken, or a loop)."""
    try:
        return path.is_symlink() and not path.exists()
    except OSError:
        return True


def relative_to(path: Path, root: Path) -> str:
    """`path` as a posix path below `root`, or as given when it lies elsewhere."""
    try:
        return resolved(path).relative_to(root).as_posix()
    except ValueError:
        return path.as_posix()


def matches(path: Path, pattern: str, root: Path) -> bool:
    """Whether an exclude or per-file-ignores pattern names `path` (by file name, by its
    path below `root`, or as a folder holding it)."""
    return _excluded(path.name, relative_to(path, root), (pattern,))


@lru_cache(maxsize=64)
def _compiled(patterns: tuple[str, ...]) -> tuple[re.Pattern, re.Pattern]:
    """The patterns as one expression for whole names, one for folders holding a path
    (one match per path instead of three fnmatch calls per pattern)."""
    whole = "|".join(fnmatch.translate(p) for p in patterns)
    folders = "|".join(fnmatch.translate(p.rstrip("/") + "/*") for p in patterns)
    return re.compile(whole), re.compile(folders)


def _excluded(name: str, relative: str, patterns: Iterable[str]) -> bool:
    patterns = tuple(patterns)
    if not patterns:
        return False
    whole, folders = _compiled(patterns)
    return bool(whole.match(name) or whole.match(relative) or folders.match(relative))


def discover(paths: Iterable[Path], excludes: list[str], root: Path, force_exclude: bool = False) -> tuple[list[Path], list[Path]]:
    """(Python files to check, paths that do not exist), sorted and without duplicates.

    Symbolic links that lead nowhere (broken, or loops) and named files that are not regular
    files (a named pipe) count as paths that cannot be read: they are reported, never read."""
    found: dict[Path, None] = {}
    missing: list[Path] = []
    for path in paths:
        if path.is_dir():
            _walk(str(path), relative_to(path, root), excludes, found, missing)
        elif _unreadable_link(path):
            missing.append(path)
        elif path.exists():
            # A file named explicitly is checked even if excluded, unless --force-exclude.
            if force_exclude and _excluded(path.name, relative_to(path, root), excludes):
                continue
            if path.is_file():
                found.setdefault(path, None)
            else:  # a named pipe, a socket or a device: reading it could wait forever
                missing.append(path)
        else:
            missing.append(path)
    return sorted(found, key=lambda p: p.as_posix()), missing


def _walk(folder: str, below: str, excludes: list[str], found: dict[Path, None], missing: list[Path]) -> None:
    """A folder's Python files, then its subfolders', in name order (symbolic links to folders
    are not followed). `below` is the folder's path below the root that anchors patterns:
    resolved once for the walked path, then extended name by name (a call per folder to
    resolve it cost a third of a warm run's discovery)."""
    try:
        with os.scandir(folder) as listing:
            entries = sorted(listing, key=lambda e: e.name)
    except OSError:
        return
    inside = below + "/" if below not in ("", ".") else ""
    subfolders = []
    for entry in entries:
        name = entry.name
        try:
            is_dir = entry.is_dir()
        except OSError:
            is_dir = False
        if is_dir:
            if not _excluded(name, inside + name, excludes) and not entry.is_symlink():
                subfolders.append(entry)
        elif name.endswith(".py") and not _excluded(name, inside + name, excludes):
            candidate = Path(entry.path)
            try:
                is_file = entry.is_file()
            except OSError:
                is_file = False
            if is_file:
                found.setdefault(candidate, None)
            elif _unreadable_link(candidate):
                missing.append(candidate)
    for entry in subfolders:
        _walk(entry.path, inside + entry.name, excludes, found, missing)


def module_name_for(path: Path) -> tuple[str, Path, bool]:
    """(dotted module name, import root, is package) from the __init__.py files around `path`."""
    path = resolved(path)
    is_package = path.name == "__init__.py"
    package, root = _package_of(path.parent)
    parts = [p for p in (package, "" if is_package else path.stem) if p]
    return ".".join(parts), root, is_package


@lru_cache(maxsize=4096)
def _package_of(folder: Path) -> tuple[str, Path]:
    """(dotted package name, import root) of a folder: looked up once per folder, not per file."""
    if not (folder / "__init__.py").is_file() or folder.parent == folder:
        return "", folder
    package, root = _package_of(folder.parent)
    return (f"{package}.{folder.name}" if package else folder.name), root
