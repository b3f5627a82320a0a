"""Every rule's documented examples are its tests: bad ones produce exactly the rule on
the lines marked `# expect: CGxxx`, good ones (the first is the fix) produce nothing."""
from __future__ import annotations

import pytest

from cglint import catalogue
from cglint.api import check_source
from cglint.rule import RUNTIME, expected_markers

RULES = [r for r in catalogue.rule_classes() if r.scope != RUNTIME]


def _cases(kind: str):
    for rule in RULES:
        for index, example in enumerate(getattr(rule, kind)):
            yield pytest.param(rule, example, id=f"{rule.code}-{kind}-{index}")


def test_every_static_rule_has_examples():
    for rule in RULES:
        assert rule.invalid, f"{rule.code} has no bad example"
        assert rule.valid, f"{rule.code} has no fixed example"


@pytest.mark.parametrize("rule, example", list(_cases("invalid")))
def test_bad_example_is_flagged_on_marked_lines(rule, example):
    found = {(f.code, f.line) for f in check_source(example, "example.py")}
    expected = expected_markers(example)
    assert any(code == rule.code for code, _ in expected), "a bad example must mark its own rule"
    assert found == expected


@pytest.mark.parametrize("rule, example", list(_cases("valid")))
def test_fixed_example_is_clean(rule, example):
    assert check_source(example, "example.py") == []
