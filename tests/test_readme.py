"""The README is tested: its example outputs are what its commands print on the bundled
fixtures, the commands a newcomer copies are the ones CI runs and parse, and every file it
names exists. (The pre-commit snippet runs in tests/test_precommit.py.)"""
from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest

from cglint.cli import build_parser
from cglint.verify.run import cli as verify_cli
from cglint.tomlread import toml

from .readme_examples import README, ROOT, examples, excerpt, run

DOCS = [README, *sorted((ROOT / "docs").glob("*.md"))]
PLACEHOLDER = "https://github.com/<your-org>/cglint"


def _blocks(path: Path, language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", path.read_text("utf-8"), re.S)


def _section(title: str) -> str:
    text = README.read_text("utf-8")
    start = text.index(f"## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start:end]


def _commands(block: str) -> list[list[str]]:
    """The commands of a shell block, `&&` chains split, comments dropped."""
    found = []
    for line in block.splitlines():
        words = shlex.split(line, comments=True)
        while words:
            cut = words.index("&&") if "&&" in words else len(words)
            found.append(words[:cut])
            words = words[cut + 1:]
    return [c for c in found if c]


@pytest.mark.parametrize("command, shown, body", examples(README.read_text("utf-8")), ids=lambda v: str(v)[:40])
def test_example_output_is_what_the_command_prints(command, shown, body):
    status, output = run(command)
    assert status == 1  # the fixtures have findings
    assert body == excerpt(output, shown), "README.md is stale: run `python -m tests.readme_examples`"


def test_quick_start_shows_the_output_of_its_own_command():
    quick_start = _section("Quick start")
    (install_and_check, install_and_test) = [_commands(b) for b in re.findall(r"```sh\n(.*?)```", quick_start, re.S)]
    assert install_and_check[0] == ["pip", "install", "-e", "."]
    (command, shown, _), *_ = examples(quick_start)
    assert install_and_check[1] == shlex.split(command) and shown == "summary"
    assert install_and_test[-1][:3] == ["python", "-m", "pytest"]


def test_ci_runs_the_readme_test_command():
    readme = _commands(re.findall(r"```sh\n(.*?)```", _section("Quick start"), re.S)[1])
    ci = _commands("\n".join(line for line in (ROOT / ".ci/run").read_text().splitlines() if line.startswith("python -m")))

    def plain(command: list[str]) -> list[str]:  # CI adds `python -m` and quiet flags
        command = command[2:] if command[:2] == ["python", "-m"] and command[2] == "pip" else command
        return [w for w in command if w not in ("-q", "--quiet", "--upgrade")]

    ci = [plain(c) for c in ci if c[2:4] != ["pip", "install"] or "pip" not in c[4:]]  # not pip's self-upgrade
    assert [plain(c) for c in readme] == ci


def test_install_lines_work_outside_the_repository():
    """cglint is not on PyPI: every install names a checkout or the git URL with its
    placeholder, and every extra it names exists."""
    extras = set(toml.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"])
    installs = []
    for path in DOCS:
        for block in _blocks(path, "sh") + _blocks(path, "yaml"):
            for line in block.splitlines():
                line = re.sub(r"^\s*- run:\s*", "", line)
                installs += [c for c in _commands(line) if c[:2] == ["pip", "install"]]
    assert installs
    for command in installs:
        for requirement in command[2:]:
            if requirement == "-e":
                continue
            name = re.match(r"[\w.-]+", requirement)[0]
            if name == "." or name == "cglint":
                for extra in re.findall(r"\[(\w+)\]", requirement):
                    assert extra in extras, command
            if name == "cglint":
                assert f" @ git+{PLACEHOLDER}" in requirement, f"{command}: cglint is installed from a checkout or its git URL"


def test_the_install_section_names_every_extra():
    """`cglint server` needs the `server` extra: the Install section, where users look, says
    how to install each extra (it was only in docs/editors.md)."""
    extras = set(toml.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"])
    install = _section("Install")
    named = {extra for block in re.findall(r"```sh\n(.*?)```", install, re.S) for extra in re.findall(r'"\.\[(\w+)\]"', block)}
    assert named == extras - {"test"}
    assert '".[test]"' in install


def test_the_speed_table_gives_cold_and_warm_times_and_the_whole_repository():
    """The table said "--no-cache" over figures measured warm; each row now gives both, and
    the first row is the run users make first, `cglint check .` of this repository."""
    speed = _section("Speed")
    header, _, *rows = [line for line in speed.splitlines() if line.startswith("|")]
    assert [cell.strip() for cell in header.strip("|").split("|")] == ["command", "cold (`--no-cache`)", "warm"]
    commands = [re.match(r"\| `(cglint [^`]+)`", row)[1] for row in rows]
    assert commands[0] == "cglint check ."
    parser = build_parser()
    for row, command in zip(rows, commands):
        assert len(re.findall(r"\| \d+(?:\.\d+)? s ", row + " ")) == 2, row
        parser.parse_args(shlex.split(command)[1:])
        assert all((ROOT / path).exists() for path in shlex.split(command)[2:]), command


def test_every_cglint_command_in_the_docs_parses():
    parser = build_parser()
    seen = 0
    for path in DOCS:
        for block in _blocks(path, "sh") + _blocks(path, "yaml"):
            for line in block.splitlines():
                line = re.sub(r"^\s*- run:\s*", "", line)
                for command in _commands(line) if line.lstrip().startswith("cglint ") else []:
                    seen += 1
                    try:
                        if command[1] == "verify":
                            verify_cli.parse(command[2:])
                        else:
                            parser.parse_args(command[1:])
                    except (SystemExit, verify_cli.Usage):
                        pytest.fail(f"{path.name}: `{' '.join(command)}` does not parse")
    assert seen >= 5


def test_files_the_docs_name_exist():
    prefixes = ("fixtures/", "docs/", "bench/", "cglint/", "rules/", "tests/", ".ci/", ".pre-commit-hooks.yaml")
    for path in DOCS:
        text = path.read_text("utf-8")
        links = [link for link in re.findall(r"\]\(([^)#\s]+)\)", text) if "://" not in link]
        # A placeholder code (`bench/gpu_cases/CGxxx.py`) names a pattern, not a file.
        named = [code for code in re.findall(r"`([^`\s]+)`", text) if code.startswith(prefixes) and "CGxxx" not in code]
        for target in links:
            assert (path.parent / target).exists(), f"{path.name} links to {target}, which does not exist"
        for target in named:
            assert (ROOT / target).exists(), f"{path.name} names {target}, which does not exist"
    assert "(docs/design.md)" in README.read_text("utf-8")


def test_design_doc_describes_the_json_the_checker_writes(monkeypatch):
    from cglint.engine.captures import CaptureKind

    design = ROOT / "docs" / "design.md"
    example = json.loads(_blocks(design, "json")[0])
    status, output = run("cglint check --format json fixtures/decode_loop")
    real = json.loads(output)
    assert status == 1 and set(example) == set(real)
    shown = example["findings"][0]
    finding = next(f for f in real["findings"] if (f["code"], f["line"]) == (shown["code"], shown["line"]))
    assert set(shown) == set(finding) and shown["fix_hint"] == finding["fix_hint"]
    assert {k: shown[k] for k in ("column", "end_column", "category", "severity")} == {k: finding[k] for k in ("column", "end_column", "category", "severity")}
    paragraph = design.read_text("utf-8").split("- `region` is")[1].split("- `trace`")[0]
    kinds = {code.removesuffix(" NAME") for code in re.findall(r"`([^`]+)`", " ".join(paragraph.split()))}
    assert kinds >= {k.value for k in CaptureKind}
