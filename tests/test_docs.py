"""What is generated from the rule classes (docs/rules.md, rules/index.toml, the tables of the
README and of docs/) must be regenerated when they change: `python -m cglint.docs`."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from cglint import catalogue, docs
from cglint.rule import without_markers

ROOT = Path(__file__).resolve().parent.parent
RULES_MD = ROOT / "docs" / "rules.md"
GENERATED = docs.generated(ROOT)


@pytest.mark.parametrize("path", sorted(GENERATED), ids=lambda path: path.relative_to(ROOT).as_posix())
def test_generated_file_is_up_to_date(path):
    assert path.read_text("utf-8") == GENERATED[path], f"{path.relative_to(ROOT)} is stale: run `python -m cglint.docs`"


def test_every_table_is_generated_somewhere_and_every_block_is_known():
    named = [m["name"] for page in docs.pages(ROOT) for m in docs.BLOCK.finditer(page.read_text("utf-8"))]
    assert sorted(named) == sorted(docs.BLOCKS)
    with pytest.raises(ValueError, match="unknown generated block 'rule-list'"):
        docs.fill_blocks("<!-- generated: rule-list -->\n<!-- end of generated: rule-list -->\n")


def test_check_says_what_is_stale_and_writes_nothing(tmp_path, monkeypatch, capsys):
    (tmp_path / "docs").mkdir()
    (tmp_path / "rules").mkdir()
    readme = "# x\n\n<!-- generated: runtime-table -->\n| old |\n<!-- end of generated: runtime-table -->\n"
    (tmp_path / "README.md").write_text(readme)
    monkeypatch.setattr(docs, "ROOT", tmp_path)
    assert docs.main(["--check"]) == 1
    assert (tmp_path / "README.md").read_text() == readme
    assert capsys.readouterr().err.split() == ["stale", "rules/index.toml", "stale", "docs/rules.md", "stale", "README.md"]
    assert docs.main([]) == 0
    assert docs.main(["--check"]) == 0
    assert "| CG991 | error |" in (tmp_path / "README.md").read_text()


def test_every_rule_is_documented_in_full():
    text = docs.reference()
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
        if rule.fixed and rule.fixed[0] is not None:  # what --fix changes in the first example
            removed = [line for line in without_markers(rule.invalid[0]).splitlines() if line not in rule.fixed[0].splitlines()]
            assert removed and all(f"\n-{line}\n" in text for line in removed)


README = ROOT / "README.md"


def test_adding_a_rule_names_paths_and_commands_that_exist():
    text = README.read_text("utf-8")
    section = text.split("## Adding a rule\n", 1)[1].split("\n## ", 1)[0]
    root = README.parent
    paths = [p.replace("CGxxx", "CG101") for p in re.findall(r"`((?:rules|bench|cglint|tests|docs)/[\w./-]+)`", section)]
    assert paths == ["tests/test_rule_examples.py", "cglint/catalogue.py", "rules/vocabulary.toml", "cglint/vocabulary.py", "rules/index.toml", "docs/rules.md",
                     "docs/verify.md", "tests/test_docs.py", "bench/gpu_cases/CG101.py", "rules/gpu-evidence.json", "tests/test_gpu_evidence.py"]
    assert [p for p in paths if not (root / p).exists()] == []
    # The regenerate step names every file the command writes.
    assert {path.relative_to(root).as_posix() for path in GENERATED} - {"README.md"} <= set(paths)
    assert "`python -m cglint.docs`" in section
    assert "`python bench/gpu_evidence.py --out rules/gpu-evidence.json CGxxx`" in section
    from cglint.rule import Rule

    attributes = set(re.findall(r"`(\w+)`", section.split("2. ", 1)[0])) - {"CG", "None"}
    assert attributes == {"code", "name", "category", "severity", "summary", "message", "fix_hint", "why", "nodes", "scope", "invalid",
                          "valid", "fix_safety", "fixed"}
    assert [a for a in sorted(attributes) if not hasattr(Rule, a) and a not in Rule.__annotations__] == []
