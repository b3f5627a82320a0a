"""The rule catalogue: codes, categories and the generated index stay consistent."""
from __future__ import annotations

import subprocess
import sys
from importlib import resources

from cglint import catalogue
from cglint.rule import CATEGORIES, SEVERITIES


def test_rule_index_is_generated_from_the_rule_classes():
    stored = resources.files("cglint.rules").joinpath("index.toml").read_text("utf-8")
    assert stored == catalogue.render_index(), "run: python -m cglint.catalogue > rules/index.toml"


def test_every_rule_is_well_formed_and_in_its_category_block():
    blocks = {"sync": "1", "control-flow": "2", "cpu-rng": "3", "realloc": "4", "host-effect": "5",
              "frozen-scalar": "6", "dynamic-shape": "7", "stream": "8", "setup": "9", "memory": "9"}
    names = set()
    for rule in catalogue.rule_classes():
        assert rule.code[:2] == "CG" and len(rule.code) == 5 and rule.code[2:].isdigit()
        assert rule.category in CATEGORIES and rule.severity in SEVERITIES
        assert rule.code[2] == blocks[rule.category], rule.code
        assert rule.name not in names and rule.name == rule.name.lower()
        names.add(rule.name)
        assert rule.summary and rule.message and rule.fix_hint and rule.why


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
    assert done.stdout.strip() == "All checks passed (1 file checked)."


def test_readme_lists_every_rule():
    from pathlib import Path

    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text("utf-8")
    missing = [rule.code for rule in catalogue.rule_classes() if f"| {rule.code} | {rule.category} | {rule.severity} |" not in readme]
    assert not missing, f"README rule table lacks or misstates {missing}"
