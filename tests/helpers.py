"""Test helpers: write a small project to a folder and check it."""
from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Optional

from cglint import catalogue
from cglint.check import check_paths
from cglint.config import Config, from_table


# The families the engine tests exercise; other rules (setup, memory...) have their own tests.
CORE = ("sync", "control-flow", "cpu-rng", "realloc")


def capture_script(imports: str, *calls: str) -> str:
    """A script that runs `calls` inside a `torch.cuda.graph` capture on a static input `x`."""
    body = "".join(f"    {call}\n" for call in calls)
    return (
        f"import torch\n{imports}\n\ng = torch.cuda.CUDAGraph()\n"
        f'x = torch.zeros(4, device="cuda")\nwith torch.cuda.graph(g):\n{body}'
    )


def write_project(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
    return root


def findings(root: Path, files: dict[str, str], config: Optional[dict] = None, paths: Optional[list[str]] = None, select=CORE):
    """Check a project made of `files` for the `select`ed rules."""
    write_project(root, files)
    cfg = from_table(config, root / "cglint.toml") if config else Config(root=root)
    targets = [root / p for p in paths] if paths else [root]
    codes = catalogue.selected(list(select), []) if select else None
    return check_paths(targets, cfg, codes).findings


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
