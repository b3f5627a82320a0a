"""docs/rules.md is generated from the rule classes; it must be regenerated when they change."""
from __future__ import annotations

import re
from pathlib import Path

from cglint import catalogue
from cglint.docs import render

RULES_MD = Path(__file__).resolve().parent.parent / "docs" / "rules.md"


def test_rules_md_is_up_to_date():
    assert RULES_MD.read_text("utf-8") == render(), "docs/rules.md is stale: run `python -m cglint.docs > docs/rules.md`"


def test_every_rule_is_documented_in_full():
    text = render()
    for rule in catalogue.rule_classes():
        assert f"| [{rule.code}](#{rule.code.lower()}) | `{rule.name}` | {rule.category} | {rule.severity} |" in text
        assert f"### {rule.code} `{rule.name}` ({rule.category}, {rule.severity})\n" in text
        assert f"**What it does.** {rule.summary}\n" in text
        why, hint = " ".join(rule.why.split()), re.sub(r"{(\w+)}", r"<\1>", rule.fix_hint)
        assert f"**Why is this bad?** {why}\n" in text
        assert f"**Fix.** {hint}\n" in text
        assert f"**Fix safety.** {rule.fix_safety}\n" in text
        if rule.invalid:  # the first example, its markers read as what they mean
            assert rule.invalid[0].strip("\n").replace("# expect: ", "# flagged: ") in text
        if rule.valid:
            assert rule.valid[0].strip("\n") in text
