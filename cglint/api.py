"""The Python API for editors and other tools: check a source string or paths, get findings."""
from __future__ import annotations

from pathlib import Path
from typing import Iterable, Optional, Union

from cglint import catalogue
from cglint.check import CheckResult, check_files, check_paths
from cglint.config import Config
from cglint.config import load as load_config
from cglint.findings import Finding


def check_source(
    text: str,
    filename: Union[str, Path] = "snippet.py",
    *,
    select: Optional[Iterable[str]] = None,
    ignore: Iterable[str] = (),
    config: Optional[Config] = None,
) -> list[Finding]:
    """Findings for one module given as text. Imports resolve against files beside `filename`."""
    path = Path(filename)
    config = config or Config(root=path.parent.resolve() if path.parent.exists() else Path.cwd())
    codes = catalogue.selected(list(select) if select else config.select, [*config.ignore, *ignore])
    return check_files([path], config, codes, sources={path: text}).findings


def check(paths: Iterable[Union[str, Path]], *, config_file: Optional[Path] = None, select: Optional[Iterable[str]] = None, ignore: Iterable[str] = ()) -> CheckResult:
    """`cglint check` without the command line: paths in, findings and the file count out."""
    paths = [Path(p) for p in paths] or [Path(".")]
    config = load_config(config_file, paths[0])
    codes = catalogue.selected(list(select) if select else config.select, [*config.ignore, *ignore])
    return check_paths(paths, config, codes)


def fix_source(
    text: str,
    filename: Union[str, Path] = "snippet.py",
    *,
    select: Optional[Iterable[str]] = None,
    ignore: Iterable[str] = (),
    config: Optional[Config] = None,
) -> str:
    """`text` with every safe automatic fix applied (what `cglint check --fix` would write)."""
    from cglint.fix import fix_files

    path = Path(filename)
    config = config or Config(root=path.parent.resolve() if path.parent.exists() else Path.cwd())
    codes = catalogue.selected(list(select) if select else config.select, [*config.ignore, *ignore])
    change = fix_files([path], config, codes, sources={path: text}).files.get(path.resolve())
    return change.after if change is not None else text
