"""docs/rules.md is generated from the rule classes; it must be regenerated when they change."""
from __future__ import annotations

from pathlib import Path

from cglint import catalogue
from cglint.docs import render

RULES_MD = Path(__file__).resolve().parent.parent / "docs" / "rules.md"


def test_rules_md_is_up_to_date():
    assert RULES_MD.read_text("utf-8") == render(), "docs/rules.md is stale: run `python -m cglint.docs > docs/rules.md`"


def test_every_rule_is_documented():
    text = render()
    for rule in catalogue.rule_classes():
        assert f"{rule.code} `{rule.name}`" in text
        assert rule.why.split()[0] in text
