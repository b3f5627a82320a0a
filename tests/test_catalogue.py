"""The rule catalogue: codes, categories and the contract a rule class is loaded under (the
files generated from it are tested in tests/test_docs.py)."""
from __future__ import annotations

import subprocess
import sys

import libcst as cst
import pytest

import cglint.rules
from cglint import catalogue
from cglint.api import check_source
from cglint.engine.checker import Engine
from cglint.engine.walk import DISPATCHED, DISPATCHED_STATEMENTS
from cglint.rule import CATEGORIES, Rule, contract_problems


def test_every_rule_is_in_its_category_block():
    # The rest of a rule's form is checked when the rules load (catalogue.check_contract).
    blocks = {"sync": "1", "control-flow": "2", "cpu-rng": "3", "realloc": "4", "host-effect": "5",
              "frozen-scalar": "6", "dynamic-shape": "7", "stream": "8", "setup": "9", "memory": "9"}
    misplaced = [rule.code for rule in catalogue.rule_classes() if rule.code[2] != blocks[rule.category]]
    assert misplaced == []


def test_selectors_expand_by_code_prefix_category_and_all():
    assert catalogue.expand(["CG101"]) == {"CG101"}
    assert "CG101" in catalogue.expand(["CG1"]) and "CG201" not in catalogue.expand(["CG1"])
    assert catalogue.expand(["realloc"]) == {c for c, (_, cat, _) in catalogue.index().items() if cat == "realloc"}
    assert catalogue.expand(["ALL"]) == set(catalogue.all_codes())


def test_a_file_without_captures_is_checked_without_loading_libcst_or_rich(tmp_path):
    (tmp_path / "util.py").write_text("def add(a, b):\n    return a + b\n")
    code = (
        "import sys; from cglint.cli import main; rc = main(['check', 'util.py']); "
        "assert 'libcst' not in sys.modules and 'rich' not in sys.modules, 'heavy import'; sys.exit(rc)"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "No capture found in 1 file checked: no code was checked for CUDA-graph hazards."


class EarlyReturn(Rule):
    """A rule that waits for a node type the walk never hands to rules."""

    code = "CG199"
    name = "early-return"
    category = "sync"
    severity = "error"
    summary = "Returns inside a captured region."
    message = "`{expr}` returns"
    fix_hint = "Do not."
    why = "It never fires."
    nodes = (cst.Return, cst.Call)

    def check(self, node, ctx):
        yield node


def _load_with(monkeypatch, extra):
    shipped = cglint.rules.all_rule_classes()
    monkeypatch.setattr(cglint.rules, "all_rule_classes", lambda: [*shipped, *extra])
    catalogue.rule_classes.cache_clear()
    try:
        return catalogue.rule_classes()
    finally:
        catalogue.rule_classes.cache_clear()


def test_a_rule_waiting_for_a_node_the_walk_never_dispatches_fails_to_load(monkeypatch):
    with pytest.raises(catalogue.RuleContractError) as failure:
        _load_with(monkeypatch, [EarlyReturn])
    assert str(failure.value) == (
        "broken rule catalogue:\n  CG199 EarlyReturn: `nodes` names Return, which the walk never hands "
        "to rules (cglint/engine/walk.py DISPATCHED)"
    )


def test_broken_declarations_fail_to_load_each_with_its_reason(monkeypatch):
    class Misfiled(EarlyReturn):
        code = "CG101"  # taken by tensor-to-scalar
        name = "Misfiled"
        category = "sinks"
        nodes = (cst.BaseExpression,)  # an abstract type: no node is of it exactly

        def fix(self, node):
            return None

    with pytest.raises(catalogue.RuleContractError) as failure:
        _load_with(monkeypatch, [Misfiled])
    assert str(failure.value).splitlines()[1:] == [
        "  CG101 Misfiled: name 'Misfiled' is not kebab-case",
        f"  CG101 Misfiled: category 'sinks' is not one of {', '.join(CATEGORIES)}",
        "  CG101 Misfiled: `nodes` names BaseExpression, which the walk never hands to rules (cglint/engine/walk.py DISPATCHED)",
        "  CG101 Misfiled: fix() must take (self, node, ctx)",
        "  CG101 Misfiled: defines fix() but no fix_safety (what the fix can change, shown by `cglint rule`)",
        "  Misfiled and TensorToScalar share the code 'CG101'",
    ]


def test_a_fix_comes_with_what_it_writes_for_each_bad_example():
    class Unfixed(EarlyReturn):
        nodes = (cst.Call,)
        fixed = ("import torch\n",)

    class Fixing(Unfixed):
        invalid = ("a = 1  # expect: CG199\n", "b = 2  # expect: CG199\n")
        fix_safety = "Safe."

        def fix(self, node, ctx):
            return None

    assert contract_problems(Unfixed, DISPATCHED) == ["CG199 Unfixed: has `fixed` outputs but no fix()"]
    assert contract_problems(Fixing, DISPATCHED) == [
        "CG199 Fixing: defines fix() but `fixed` has 1 outputs for 2 `invalid` examples (what --fix writes for each, None where it writes nothing)"
    ]


def test_a_category_whose_module_is_missing_fails_to_load(monkeypatch):
    shipped = [r for r in cglint.rules.all_rule_classes() if r.category != "stream"]
    monkeypatch.setattr(cglint.rules, "all_rule_classes", lambda: shipped)
    catalogue.rule_classes.cache_clear()
    try:
        with pytest.raises(catalogue.RuleContractError, match="no rule in categories stream: is a module of rules/ missing"):
            catalogue.rule_classes()
    finally:
        catalogue.rule_classes.cache_clear()


def test_rules_are_found_in_their_modules_without_a_list():
    modules = {rule.__module__.rsplit(".", 1)[-1] for rule in catalogue.rule_classes()}
    assert {"sync", "control_flow", "cpu_rng", "realloc", "host_effect", "frozen_scalar", "dynamic_shape",
            "stream", "setup", "warmup", "autocast", "memory", "runtime"} <= modules
    assert catalogue.by_code()["CG104"].can_fix() and not catalogue.by_code()["CG101"].can_fix()


# Every statement the walk dispatches, in a captured region, beside those it only looks into.
EVERY_STATEMENT = """
import torch

def step(x, items, cache):
    import math
    global COUNT
    y: torch.Tensor = x * 2
    y += 1
    z = y
    assert z is not None
    del z
    if x is None:
        return None
    while False:
        pass
    for item in items:
        pass
    with torch.no_grad():
        w = [v for v in items if v]
    try:
        raise ValueError(f"{y!r:>4}")
    except ValueError:
        pass
    match cache:
        case {"k": v}:
            pass
    return lambda q: q, {**cache}, items[1:2], -x, not x, x and x, x < 1 < 2, (yield from items)

with torch.cuda.graph(g):
    step(static_x, [], {})
"""


def test_the_dispatched_table_is_what_the_walk_dispatches(monkeypatch):
    seen = set()
    run_rules = Engine.run_rules

    def recording(self, rules, node, walker):
        seen.add(type(node))
        return run_rules(self, rules, node, walker)

    monkeypatch.setattr(Engine, "run_rules", recording)
    check_source(EVERY_STATEMENT, "step.py")
    assert seen <= DISPATCHED, seen - DISPATCHED
    assert seen >= DISPATCHED_STATEMENTS
    assert not seen & {cst.Return, cst.Raise, cst.Try, cst.Match, cst.Import, cst.Global, cst.Expr, cst.Pass}
    assert {cst.Call, cst.Lambda, cst.CompIf, cst.FormattedStringExpression, cst.StarredDictElement, cst.Slice,
            cst.ComparisonTarget, cst.BooleanOperation, cst.From, cst.Yield} <= seen
