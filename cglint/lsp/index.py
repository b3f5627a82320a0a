"""The project's findings, kept up to date as buffers are edited.

A finding in one file can come from a capture in another (a call from the region reaches
it), so the whole project is checked once (through the result cache), and each edited
buffer is then checked again together with the files whose captures reached it: the
findings those files produce replace the ones they produced before. Nothing is written to
disk; unsaved buffers are read from memory wherever the engine reaches them.

A capture elsewhere that reaches a file for the first time because of an edit is found
when the file is saved, which checks the project again (incrementally, from the cache).
"""
from __future__ import annotations

import threading
from pathlib import Path
from typing import Optional

from cglint import config as config_module
from cglint.check import check_files, check_paths
from cglint.discovery import discover, resolved
from cglint.findings import Finding
from cglint.selection import Selection


def finding_path(finding: Finding) -> Path:
    """The file a finding is in (findings name files relative to the working directory)."""
    return resolved(Path(finding.path))


def origin(finding: Finding) -> Path:
    """The file whose check produces a finding: its capture's, or its own."""
    return resolved(Path(finding.region.path)) if finding.region is not None else finding_path(finding)


class ProjectIndex:
    def __init__(self, root: Path, config: config_module.Config):
        self.root = root
        self.config = config
        self.selection = Selection.of(config)
        self.findings: list[Finding] = []
        self._lock = threading.Lock()

    @classmethod
    def for_root(cls, root: Path) -> "ProjectIndex":
        """The index of the project at `root`, configured as `cglint check` there would be.
        Raises config.ConfigError and catalogue.UnknownSelector."""
        config = config_module.load(None, root)
        # Without a configuration file, the workspace (not the editor's working directory)
        # anchors exclusions and holds the cache.
        return cls(root, config if config.source is not None else config_module.Config(root=root))

    def checks(self, path: Path) -> bool:
        """Whether `path` is a file `cglint check` would check (excluded ones are not)."""
        return path.suffix == ".py" and bool(discover([path], self.config.excludes, self.config.root, force_exclude=True)[0])

    def index(self) -> None:
        """Check the whole project from disk (answered from the cache when nothing changed).
        In this process only: syntax-check workers forked from a server's threads can deadlock."""
        result = check_paths([self.root], self.config, self.selection, use_cache=True)
        with self._lock:
            self.findings = result.findings

    def check(self, path: Path, sources: dict[Path, str]) -> None:
        """Check the file at `path` again, with `sources` (resolved path -> text) standing
        for the files open in the editor, and with the files whose captures reached it."""
        entries = self._entries(path, sources)
        result = check_files(entries, self.config, self.selection, sources=sources)
        produced = set(entries)
        with self._lock:
            kept = [f for f in self.findings if origin(f) not in produced]
            self.findings = kept + [f for f in result.findings if origin(f) in produced]

    def _entries(self, path: Path, sources: dict[Path, str]) -> list[Path]:
        """`path` (resolved), and the files whose captures reached it."""
        path = resolved(path)
        with self._lock:
            reaching = {origin(f) for f in self.findings if finding_path(f) == path}
        return [path, *sorted(p for p in reaching - {path} if p in sources or p.is_file())]

    def findings_in(self, path: Path) -> list[Finding]:
        path = resolved(path)
        with self._lock:
            return sorted((f for f in self.findings if finding_path(f) == path), key=lambda f: f.sort_key)

    def fixed_text(self, path: Path, sources: dict[Path, str], code: Optional[str] = None) -> Optional[str]:
        """The text of `path` with the safe fixes applied (of rule `code` only, if given);
        None when nothing changes."""
        from cglint.fix import fix_files

        path = resolved(path)
        selection = Selection.of(self.config, [code]) if code else self.selection
        outcome = fix_files(self._entries(path, sources), self.config, selection, sources=sources)
        change = outcome.files.get(path)
        if change is None or change.after == sources.get(path):
            return None
        if code is not None:  # the fix must remove a finding of that rule from this file
            before = sum(f.code == code for f in self.findings_in(path))
            after = sum(f.code == code and finding_path(f) == path for f in outcome.result.findings)
            if after >= before:
                return None
        return change.after
