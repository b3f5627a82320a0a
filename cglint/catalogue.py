"""The rules known to cglint, looked up by code, prefix or category."""
from __future__ import annotations

from functools import lru_cache
from typing import Iterable, Optional

from cglint.rule import CATEGORIES, Rule

# The tool's own diagnostics (CG0xx) are not rule classes: they have no examples.
TOOL_DIAGNOSTICS = {
    "CG000": ("internal-error", "cglint failed on this file (a bug in cglint; please report it)"),
    "CG001": ("unreadable-file", "the file cannot be read or decoded"),
    "CG002": ("syntax-error", "the file does not parse"),
}


@lru_cache(maxsize=None)
def rule_classes() -> tuple[type[Rule], ...]:
    from cglint.rules import all_rule_classes

    return tuple(all_rule_classes())


def by_code() -> dict[str, type[Rule]]:
    return {rule.code: rule for rule in rule_classes()}


def all_codes() -> list[str]:
    return sorted([*TOOL_DIAGNOSTICS, *by_code()])


class UnknownSelector(ValueError):
    pass


def expand(selectors: Iterable[str]) -> set[str]:
    """Codes named by selectors: a code (CG101), a prefix (CG1, CG), a category (sync) or ALL."""
    codes = all_codes()
    categories = {rule.code: rule.category for rule in rule_classes()}
    chosen: set[str] = set()
    for raw in selectors:
        selector = raw.strip()
        if not selector:
            continue
        upper = selector.upper()
        if upper == "ALL":
            chosen.update(codes)
        elif selector in CATEGORIES:
            chosen.update(code for code, category in categories.items() if category == selector)
            if selector == "internal":
                chosen.update(TOOL_DIAGNOSTICS)
        elif upper.startswith("CG") and any(code.startswith(upper) for code in codes):
            chosen.update(code for code in codes if code.startswith(upper))
        else:
            raise UnknownSelector(f"unknown rule selector {raw!r}: use a code (CG101), a prefix (CG1) or a category ({', '.join(CATEGORIES[:-1])})")
    return chosen


def selected(select: Optional[Iterable[str]], ignore: Iterable[str]) -> set[str]:
    chosen = expand(select) if select else set(all_codes())
    return chosen - expand(ignore)
