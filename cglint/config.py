"""Configuration: `[tool.cglint]` in pyproject.toml, or a cglint.toml, found upward from the checked paths."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from cglint.tomlread import toml

DEFAULT_EXCLUDE = (
    ".git", ".hg", ".svn", ".venv", "venv", ".tox", ".nox", ".eggs", "__pycache__", "build", "dist",
    "node_modules", "site-packages", ".mypy_cache", ".pytest_cache", ".ruff_cache", ".cglint_cache",
    "*.egg-info",
)

_KEYS = {
    "select": list,
    "extend-select": list,
    "ignore": list,
    "per-file-ignores": dict,
    "exclude": list,
    "extend-exclude": list,
    "capture-functions": list,
    "captured": list,
}


class ConfigError(Exception):
    pass


@dataclass
class Config:
    root: Path  # where relative patterns are anchored
    source: Optional[Path] = None  # the file it came from
    select: Optional[list[str]] = None
    extend_select: list[str] = field(default_factory=list)
    ignore: list[str] = field(default_factory=list)
    per_file_ignores: dict[str, list[str]] = field(default_factory=dict)
    exclude: list[str] = field(default_factory=lambda: list(DEFAULT_EXCLUDE))
    extend_exclude: list[str] = field(default_factory=list)
    capture_functions: list[str] = field(default_factory=list)
    captured: list[str] = field(default_factory=list)

    @property
    def excludes(self) -> list[str]:
        return [*self.exclude, *self.extend_exclude]


def find_config_file(start: Path) -> Optional[Path]:
    folder = start if start.is_dir() else start.parent
    for candidate_dir in [folder, *folder.parents]:
        for name in ("cglint.toml", "pyproject.toml"):
            candidate = candidate_dir / name
            if candidate.is_file() and (name == "cglint.toml" or _has_section(candidate)):
                return candidate
    return None


def _has_section(pyproject: Path) -> bool:
    try:
        text = pyproject.read_text("utf-8")
    except (OSError, UnicodeDecodeError):
        return False
    try:
        data = toml.loads(text)
    except toml.TOMLDecodeError:
        # Broken: ours to report only if it holds our section.
        return "[tool.cglint" in text
    return "cglint" in data.get("tool", {})


def load(path: Optional[Path], start: Path) -> Config:
    """The configuration from `path`, or found from `start`; defaults when there is none."""
    if path is None:
        path = find_config_file(start.resolve())
        if path is None:
            return Config(root=Path.cwd())
    try:
        data = toml.loads(path.read_text("utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"{path}: configuration file not found") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read configuration: {exc}") from None
    except toml.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: invalid TOML: {exc}") from None
    table: Any = data.get("tool", {}).get("cglint", {}) if path.name == "pyproject.toml" else data
    if path.name != "pyproject.toml" and "tool" in data and "cglint" in data["tool"]:
        table = data["tool"]["cglint"]
    return from_table(table, path)


def from_table(table: Any, path: Path) -> Config:
    where = f"{path} [tool.cglint]" if path.name == "pyproject.toml" else str(path)
    if not isinstance(table, dict):
        raise ConfigError(f"{where}: expected a table of settings")
    unknown = sorted(set(table) - set(_KEYS))
    if unknown:
        raise ConfigError(f"{where}: unknown setting {', '.join(map(repr, unknown))}; known settings: {', '.join(_KEYS)}")
    for key, kind in _KEYS.items():
        if key in table and not isinstance(table[key], kind):
            raise ConfigError(f"{where}: `{key}` must be a {'list of strings' if kind is list else 'table'}")
        if kind is list and key in table and not all(isinstance(v, str) for v in table[key]):
            raise ConfigError(f"{where}: `{key}` must be a list of strings")
    from cglint import catalogue  # checked here, where the file can be named

    for key in ("select", "extend-select", "ignore"):
        try:
            catalogue.expand(table.get(key) or [])
        except catalogue.UnknownSelector as exc:
            raise ConfigError(f"{where}: `{key}`: {exc}") from None
    per_file = table.get("per-file-ignores", {})
    for pattern, codes in per_file.items():
        if not isinstance(codes, list) or not all(isinstance(c, str) for c in codes):
            raise ConfigError(f"{where}: per-file-ignores[{pattern!r}] must be a list of codes")
        try:
            catalogue.expand(codes)
        except catalogue.UnknownSelector as exc:
            raise ConfigError(f"{where}: per-file-ignores[{pattern!r}]: {exc}") from None
    config = Config(root=path.parent.resolve(), source=path)
    config.select = table.get("select")
    config.extend_select = table.get("extend-select", [])
    config.ignore = table.get("ignore", [])
    config.per_file_ignores = per_file
    config.exclude = table.get("exclude", list(DEFAULT_EXCLUDE))
    config.extend_exclude = table.get("extend-exclude", [])
    config.capture_functions = table.get("capture-functions", [])
    config.captured = table.get("captured", [])
    return config
