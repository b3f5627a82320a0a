"""rules/gpu-evidence.json (written on a GPU by bench/gpu_evidence.py) must cover every
static error and warning rule, and what the GPU showed must match the rule's severity:
an error rule's capture failed, a warning rule's replay diverged from eager."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from cglint import catalogue
from cglint.rule import RUNTIME

ROOT = Path(__file__).resolve().parent.parent
EVIDENCE = ROOT / "rules" / "gpu-evidence.json"
CASES = ROOT / "bench" / "gpu_cases"
# Runtime-only rules have no example to run: they report what a real capture showed.
CHECKED = [r for r in catalogue.rule_classes() if r.scope != RUNTIME and r.severity in ("error", "warning")]
OUTCOME = {"error": "capture_failed", "warning": "diverged"}


@pytest.fixture(scope="module")
def evidence() -> dict:
    return json.loads(EVIDENCE.read_text("utf-8"))


def test_evidence_names_its_environment(evidence):
    assert evidence["torch"] and evidence["device"] and evidence["device"] != "none"


@pytest.mark.parametrize("rule", CHECKED, ids=[r.code for r in CHECKED])
def test_gpu_outcome_matches_severity(rule, evidence):
    entry = evidence["rules"].get(rule.code)
    assert entry is not None, f"{rule.code} has no GPU evidence: run bench/gpu_evidence.py {rule.code} on a GPU"
    if entry.get("stale"):
        pytest.skip(f"{rule.code}: evidence awaits a GPU run: {entry['stale']}")
    assert entry["observed"] == OUTCOME[rule.severity], f"{rule.code} is {rule.severity} but the GPU showed {entry['observed']}"


@pytest.mark.parametrize("rule", CHECKED, ids=[r.code for r in CHECKED])
def test_case_declares_the_rule_severity(rule):
    case = CASES / f"{rule.code}.py"
    assert case.is_file(), f"{rule.code} needs a GPU case in bench/gpu_cases/"
    declared = re.search(r'^SEVERITY = "(\w+)"', case.read_text("utf-8"), re.M)
    assert declared and declared.group(1) == rule.severity
