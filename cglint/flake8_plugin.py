"""The flake8 plugin: `flake8 --select CG` reports cglint's findings (entry point `flake8.extension`, code `CG`).

flake8 hands over one file at a time; the plugin checks its text (the buffer flake8 read,
which may be unsaved editor text) with the configuration cglint itself would use, and
reads the modules its captures call from disk. A hazard in another file reached from a
capture in this one is that file's finding: `cglint check` reports it, flake8 cannot.
"""
from __future__ import annotations

from pathlib import Path
from typing import Iterator

from cglint import __version__


class CglintChecker:
    name = "cglint"
    version = __version__

    def __init__(self, tree, filename: str, lines: list[str]):
        self.filename = filename
        self.lines = lines

    def run(self) -> Iterator[tuple[int, int, str, type]]:
        from cglint import config as config_module
        from cglint.check import check_files
        from cglint.selection import Selection

        text = "".join(self.lines)
        path = Path("stdin.py" if self.filename in ("-", "stdin") else self.filename)
        try:
            config = config_module.load(None, path if path.exists() else Path.cwd())
        except config_module.ConfigError as exc:
            yield 1, 0, f"CG000 cglint configuration error: {exc}", type(self)
            return
        target = path.resolve()
        for f in check_files([path], config, Selection.of(config), sources={path: text}).findings:
            if f.code != "CG002" and Path(f.path).resolve() == target:  # flake8 reports syntax errors itself (E999)
                yield f.line, max(f.column - 1, 0), f"{f.code} {f.message}", type(self)
