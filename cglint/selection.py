"""Which findings are reported: one decision, as flake8's decision engine is one object.

The command line, the Python API, the check runner and the flake8 plugin all build a
`Selection` from the configuration (and their own overrides) and ask it; none of them
combines `select`, `extend-select`, `ignore`, `per-file-ignores` or suppression comments
itself.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Optional

from cglint import catalogue, suppress
from cglint.config import Config
from cglint.discovery import matches
from cglint.findings import Finding


@dataclass(frozen=True)
class Selection:
    codes: frozenset  # the rule codes chosen; the tool's own diagnostics (CG0xx) are always reported
    per_file_ignores: tuple  # (glob, codes) pairs, codes expanded
    root: Path  # where the globs are anchored

    @classmethod
    def of(
        cls,
        config: Config,
        select: Optional[Iterable[str]] = None,
        extend_select: Iterable[str] = (),
        ignore: Iterable[str] = (),
    ) -> "Selection":
        """The configuration's selection with a caller's overrides: `select` replaces the
        configured one; `ignore` and `extend-select` add to the configured lists, and an
        extended code is chosen even where an ignore names it. Raises catalogue.UnknownSelector."""
        select = list(select or ()) or config.select
        codes = catalogue.selected(select, [*config.ignore, *ignore])
        codes |= catalogue.expand([*config.extend_select, *extend_select])
        per_file = tuple((pattern, frozenset(catalogue.expand(selectors))) for pattern, selectors in config.per_file_ignores.items())
        return cls(frozenset(codes), per_file, config.root)

    def runs(self, code: str) -> bool:
        """Whether the rule `code` is chosen (the engine loads only those)."""
        return code in self.codes

    def reports(self, finding: Finding) -> bool:
        """Whether a finding is reported: its code chosen (a tool diagnostic always) and
        not ignored for its file."""
        if finding.code not in self.codes and finding.code not in catalogue.TOOL_DIAGNOSTICS:
            return False
        path = Path(finding.path)
        return not any(finding.code in codes and matches(path, pattern, self.root) for pattern, codes in self.per_file_ignores)

    def reported(self, findings: Iterable[Finding]) -> list[Finding]:
        return [f for f in findings if self.reports(f)]

    @staticmethod
    def suppressed(code: str, lines: list[str]) -> bool:
        """Whether a `# noqa` or `# cglint: ignore` comment on the finding's first or last
        line covers `code` (`lines`: the lines of its node)."""
        return suppress.is_suppressed(code, lines[:1] + lines[-1:])
