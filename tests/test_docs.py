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


README = RULES_MD.parent.parent / "README.md"


def test_adding_a_rule_names_paths_and_commands_that_exist():
    text = README.read_text("utf-8")
    section = text.split("## Adding a rule\n", 1)[1].split("\n## ", 1)[0]
    root = README.parent
    paths = [p.replace("CGxxx", "CG101") for p in re.findall(r"`((?:rules|bench|cglint|tests|docs)/[\w./-]+)`", section)]
    assert paths == ["tests/test_rule_examples.py", "cglint/catalogue.py", "rules/torch_api.toml", "bench/gpu_cases/CG101.py",
                     "rules/gpu-evidence.json", "tests/test_gpu_evidence.py"]
    assert [p for p in paths if not (root / p).exists()] == []
    for generated in ("rules/index.toml", "docs/rules.md"):  # the commands the staleness tests name
        module = "catalogue" if generated.startswith("rules") else "docs"
        assert f"`python -m cglint.{module} > {generated}`" in section
    assert "`python bench/gpu_evidence.py --out rules/gpu-evidence.json CGxxx`" in section
    from cglint.rule import Rule

    attributes = set(re.findall(r"`(\w+)`", section.split("2. ", 1)[0])) - {"CG"}
    assert attributes == {"code", "name", "category", "severity", "summary", "message", "fix_hint", "why", "nodes", "scope", "invalid", "valid", "fix_safety"}
    assert [a for a in sorted(attributes) if not hasattr(Rule, a) and a not in Rule.__annotations__] == []
