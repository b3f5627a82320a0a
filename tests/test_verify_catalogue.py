"""The verifier takes every fact about a rule from the catalogue, and its torch symbols from
the vocabulary both halves read (rules/vocabulary.toml, tests/test_vocabulary.py); none of
this needs torch."""
from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from cglint.catalogue import by_code, index
from cglint.rule import RUNTIME
from cglint import vocabulary
from cglint.verify.findings import rule_codes, rule_metadata


def reported_codes() -> set[str]:
    """Every code a module of the verifier can report: the named constants and the vocabulary's."""
    constants = {value for name, value in vars(rule_codes).items() if name.isupper() and not name.startswith("_")}
    return constants | vocabulary.codes()


def test_every_reported_code_has_the_catalogues_metadata():
    codes = reported_codes()
    assert {"CG109", "CG303", "CG304", "CG306", "CG403", "CG190", "CG991"} <= codes
    for code in codes:
        rule = by_code()[code]
        assert rule_metadata.meta(code) == (rule.name, rule.category, rule.severity, rule.fix_hint), code
        assert (rule.name, rule.category, rule.severity) == index()[code]


def test_a_broken_catalogue_is_an_error_not_a_fallback_table():
    # The verifier once kept its own table for when the catalogue failed to load, with other
    # severities than the catalogue's (CG109 error instead of info, and five more).
    probe = textwrap.dedent('''
        import cglint.catalogue as catalogue

        def broken():
            raise catalogue.RuleContractError("broken rule catalogue")

        catalogue.by_code = broken
        from cglint.verify.findings.rule_metadata import meta
        try:
            print(meta("CG109"))
        except catalogue.RuleContractError as exc:
            print("error:", exc)
    ''')
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "error: broken rule catalogue"


def test_runtime_messages_are_the_runtime_rules_templates():
    assert rule_metadata.message("CG991", "boom") == "capture failed: boom"
    for code in (rule_codes.RUNTIME_SYNC, rule_codes.CAPTURE_FAILED, rule_codes.REPLAY_DIVERGES):
        assert by_code()[code].scope == RUNTIME


def test_an_unknown_code_is_an_error():
    with pytest.raises(KeyError, match="CG999"):
        rule_metadata.meta("CG999")


def test_a_misspelt_rule_name_fails_at_lookup():
    assert rule_codes.code_of("pin-memory") == "CG109"
    with pytest.raises(LookupError, match="pin-memroy"):
        rule_codes.code_of("pin-memroy")
