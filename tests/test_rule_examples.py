"""Every rule's documented examples are its tests: bad ones produce exactly the rule on
the lines marked `# expect: CGxxx`, good ones (the first is the fix) produce nothing, and
`--fix` writes for each bad one what the rule's `fixed` says."""
from __future__ import annotations

import libcst as cst
import pytest

from cglint import catalogue
from cglint.api import check_source, fix_source
from cglint.rule import RUNTIME, without_markers

from .helpers import expected_markers

RULES = [r for r in catalogue.rule_classes() if r.scope != RUNTIME]


def _cases(kind: str):
    for rule in RULES:
        for index, example in enumerate(getattr(rule, kind)):
            yield pytest.param(rule, example, id=f"{rule.code}-{kind}-{index}")


def test_every_static_rule_has_examples():
    for rule in RULES:
        assert rule.invalid, f"{rule.code} has no bad example"
        assert rule.valid, f"{rule.code} has no fixed example"
        if rule.can_fix():  # `fixed` has one entry per bad example (the contract checks it at load)
            assert rule.fixed[0] is not None, f"{rule.code}: the documented bad example must show what the fix writes"


@pytest.mark.parametrize("rule, example", list(_cases("invalid")))
def test_bad_example_is_flagged_on_marked_lines(rule, example):
    found = {(f.code, f.line) for f in check_source(example, "example.py")}
    expected = expected_markers(example)
    assert any(code == rule.code for code, _ in expected), "a bad example must mark its own rule"
    assert found == expected


@pytest.mark.parametrize("rule, example", list(_cases("valid")))
def test_fixed_example_is_clean(rule, example):
    assert check_source(example, "example.py") == []


def _fixes():
    for rule in RULES:
        for index, (example, fixed) in enumerate(zip(rule.invalid, rule.fixed)):
            yield pytest.param(rule, without_markers(example), fixed, id=f"{rule.code}-fixed-{index}")


@pytest.mark.parametrize("rule, example, fixed", list(_fixes()))
def test_fix_writes_the_rule_s_fixed_text(rule, example, fixed):
    """The exact text `cglint check --fix` writes; it parses, has no finding of the rule left,
    and fixing it again changes nothing. None: no safe fix, the example stays as it is."""
    after = fix_source(example, "example.py")
    if fixed is None:
        assert after == example
        assert rule.code in {f.code for f in check_source(example, "example.py")}
        return
    assert after == fixed
    cst.parse_module(after)
    assert rule.code not in {f.code for f in check_source(after, "example.py")}
    assert fix_source(after, "example.py") == after


HOST_TENSORS = '''
import torch

class Sampler(torch.nn.Module):
    def forward(self, logits, temperature):
        noise = torch.rand(4)  # host memory: no `device=`
        table = torch.zeros(4)
        weights = noise.cpu()
        as_array = table.numpy()
        as_list = table.tolist()
        moved = noise.to("cpu")
        first = table[0].item()
        count = int(table.sum())
        scale = noise[0].item()
        picks = noise.tolist()
        tokens = logits.argmax(-1).cpu()
        return logits / temperature, tokens

sampler = Sampler()
with torch.cuda.graph(g):
    out = sampler(static_logits, 0.7)
'''


def test_host_tensors_are_read_without_a_sync_and_host_draws_are_frozen():
    """`.cpu()`, `.numpy()`, `.tolist()`, `.item()` of a tensor in host memory wait for no
    GPU (no CG101/CG102); numbers drawn by the CPU generator are frozen at capture (CG307)."""
    found = {(f.code, f.line) for f in check_source(HOST_TENSORS, "sampler.py")}
    assert found == {("CG307", 14), ("CG307", 15), ("CG102", 16)}
