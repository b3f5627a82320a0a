"""What the catalogue says about each rule the verifier reports.

The rule classes of rules/ (through cglint.catalogue) are the only source: a code the
catalogue does not know is an error, never a finding with made-up metadata.
"""
from __future__ import annotations

from functools import cache
from typing import NamedTuple

from cglint.findings import filled


class Meta(NamedTuple):
    name: str
    category: str
    severity: str
    fix_hint: str


@cache
def meta(code: str) -> Meta:
    rule = _rule(code)
    return Meta(rule.name, rule.category, rule.severity, rule.fix_hint)


def message(code: str, what: str) -> str:
    """The rule's message template filled with what was observed (the runtime rules' `{what}`)."""
    return filled(_rule(code).message, {"what": what})


def _rule(code: str):
    from cglint.catalogue import by_code

    try:
        return by_code()[code]
    except KeyError:
        raise KeyError(f"the verifier reports {code}, which the rule catalogue does not define") from None
