"""The Python API for editors and other tools: check a source string or paths, get findings.

`select`, `extend_select` and `ignore` combine with the configuration as the command-line
options of the same names do (selection.Selection decides for both)."""
from __future__ import annotations

from pathlib import Path
from typing import Iterable, Optional, Union

from cglint.check import CheckResult, check_files, check_paths
from cglint.config import Config
from cglint.config import load as load_config
from cglint.findings import Finding
from cglint.selection import Selection


def check_source(
    text: str,
    filename: Union[str, Path] = "snippet.py",
    *,
    select: Optional[Iterable[str]] = None,
    extend_select: Iterable[str] = (),
    ignore: Iterable[str] = (),
    config: Optional[Config] = None,
) -> list[Finding]:
    """Findings for one module given as text. Imports resolve against files beside `filename`."""
    path = Path(filename)
    config = config or _default_config(path)
    selection = Selection.of(config, select, extend_select, ignore)
    return check_files([path], config, selection, sources={path: text}).findings


def check(
    paths: Iterable[Union[str, Path]],
    *,
    config_file: Optional[Path] = None,
    select: Optional[Iterable[str]] = None,
    extend_select: Iterable[str] = (),
    ignore: Iterable[str] = (),
) -> CheckResult:
    """`cglint check` without the command line: paths in, findings and the file count out."""
    given = [Path(p) for p in paths] or [Path(".")]
    config = load_config(config_file, given[0])
    return check_paths(given, config, Selection.of(config, select, extend_select, ignore))


def fix_source(
    text: str,
    filename: Union[str, Path] = "snippet.py",
    *,
    select: Optional[Iterable[str]] = None,
    extend_select: Iterable[str] = (),
    ignore: Iterable[str] = (),
    config: Optional[Config] = None,
) -> str:
    """`text` with every safe automatic fix applied (what `cglint check --fix` would write)."""
    from cglint.fix import fix_files

    path = Path(filename)
    config = config or _default_config(path)
    selection = Selection.of(config, select, extend_select, ignore)
    change = fix_files([path], config, selection, sources={path: text}).files.get(path.resolve())
    return change.after if change is not None else text


def _default_config(path: Path) -> Config:
    """No configuration file: the defaults, with imports resolved beside `path`."""
    return Config(root=path.parent.resolve() if path.parent.exists() else Path.cwd())
