"""Test helpers: write a small project to a folder and check it."""
from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Optional

from cglint.check import check_paths
from cglint.config import Config, from_table


def write_project(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
    return root


def findings(root: Path, files: dict[str, str], config: Optional[dict] = None, paths: Optional[list[str]] = None):
    """Check a project made of `files`; returns the findings with paths relative to `root`."""
    write_project(root, files)
    cfg = from_table(config, root / "cglint.toml") if config else Config(root=root)
    targets = [root / p for p in paths] if paths else [root]
    return check_paths(targets, cfg).findings


def codes_lines(results) -> set[tuple[str, int]]:
    return {(f.code, f.line) for f in results}


def by_file(results, root: Path) -> set[tuple[str, str, int]]:
    out = set()
    for f in results:
        path = Path(f.path)
        try:
            name = path.resolve().relative_to(root.resolve()).as_posix()
        except ValueError:
            name = f.path
        out.add((name, f.code, f.line))
    return out
