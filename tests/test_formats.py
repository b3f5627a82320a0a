"""Output formats against what consumes them: SARIF validated with the official SARIF 2.1.0
schema (tests/data), GitHub workflow commands, the concise format, statistics, colour."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from cglint.cli import main
from cglint.findings import Finding, Region
from cglint.report.github import write_github

from .helpers import write_project

DATA = Path(__file__).resolve().parent / "data"
FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"


def run(args, capsys):
    code = main([str(a) for a in args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.fixture
def fixtures(tmp_path, monkeypatch):
    shutil.copytree(FIXTURES, tmp_path / "fixtures")
    (tmp_path / "fixtures/broken.py").write_text("import torch\ng = torch.cuda.CUDAGraph()\ndef f(:\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("CGLINT_OUTPUT_FORMAT", raising=False)
    return tmp_path


def test_sarif_validates_against_the_official_schema(fixtures, capsys):
    jsonschema = pytest.importorskip("jsonschema")
    schema = json.loads((DATA / "sarif-schema-2.1.0.json").read_text("utf-8"))
    code, out, _ = run(["check", "--format", "sarif", "fixtures"], capsys)
    assert code == 1
    sarif = json.loads(out)
    validator = jsonschema.Draft4Validator(schema, format_checker=jsonschema.FormatChecker())
    errors = sorted(validator.iter_errors(sarif), key=lambda e: list(e.path))
    assert not errors, "\n".join(f"{list(e.path)}: {e.message}" for e in errors[:10])

    run_ = sarif["runs"][0]
    rules = run_["tool"]["driver"]["rules"]
    for rule in rules:
        assert rule["shortDescription"]["text"] and rule["help"]["text"]
    by_id = {rule["id"]: rule for rule in rules}
    assert "**Why is this bad?**" in by_id["CG101"]["help"]["markdown"]
    results = run_["results"]
    _, json_out, _ = run(["check", "--format", "json", "fixtures"], capsys)
    assert len(results) == len(json.loads(json_out)["findings"])
    for result in results:
        assert rules[result["ruleIndex"]]["id"] == result["ruleId"]
    syntax = next(r for r in results if r["ruleId"] == "CG002")
    assert syntax["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] == "fixtures/broken.py"
    deep = next(r for r in results if r["ruleId"] == "CG101" and "kv_cache" in r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"])
    assert deep["relatedLocations"][0]["message"]["text"].startswith("captured by ")
    flow = deep["codeFlows"][0]["threadFlows"][0]["locations"]
    assert flow[0]["location"]["physicalLocation"]["artifactLocation"]["uri"] == "fixtures/decode_loop/generate.py"
    assert len({r["partialFingerprints"]["cglintFinding/v1"] for r in results}) == len(results)


def test_sarif_messages_are_sentences_the_fix_follows(fixtures, capsys):
    """A message without a full stop ran into its fix ("...at that moment Fix: Allocate...")."""
    results = json.loads(run(["check", "--format", "sarif", "fixtures/decode_loop"], capsys)[1])["runs"][0]["results"]
    _, out, _ = run(["check", "--format", "json", "fixtures/decode_loop"], capsys)
    findings = json.loads(out)["findings"]
    assert len(results) == len(findings) and any(not f["message"].endswith(".") for f in findings)
    for result, finding in zip(results, findings):
        text = result["message"]["text"]
        assert text.startswith(finding["message"]) and text.endswith(".")
        message = finding["message"] if finding["message"].endswith(".") else finding["message"] + "."
        assert text == f"{message} Fix: {finding['fix_hint']}" + ("" if finding["fix_hint"].endswith(".") else ".")


def test_sarif_fingerprints_survive_unrelated_edits(fixtures, capsys):
    def fingerprints():
        out = run(["check", "--format", "sarif", "fixtures/training_step"], capsys)[1]
        return sorted((r["ruleId"], r["partialFingerprints"]["cglintFinding/v1"]) for r in json.loads(out)["runs"][0]["results"])

    before = fingerprints()
    path = fixtures / "fixtures/training_step/train.py"
    path.write_text("# A comment added at the top.\n\n" + path.read_text())
    assert fingerprints() == before


def test_github_annotations_escape_their_fields(capsys):
    findings = [
        Finding("src/a,b:c.py", 3, 5, 3, 9, "CG101", "sync", "error", "100% wrong\nsecond line"),
        Finding("src/m.py", 7, 1, 8, 2, "CG951", "memory", "info", "pool", region=Region("src/m.py", 2, "torch.cuda.graph")),
    ]
    import io

    stream = io.StringIO()
    write_github(findings, stream)
    assert stream.getvalue().splitlines() == [
        "::error file=src/a%2Cb%3Ac.py,line=3,col=5,endLine=3,endColumn=9,title=CG101::CG101 100%25 wrong%0Asecond line",
        "::notice file=src/m.py,line=7,col=1,endLine=8,endColumn=2,title=CG951::CG951 pool",
    ]


def test_github_format_from_the_command_line(fixtures, capsys):
    code, out, _ = run(["check", "--format", "github", "fixtures/training_step"], capsys)
    assert code == 1
    lines = out.splitlines()
    assert lines and all(line.startswith(("::error file=", "::warning file=", "::notice file=")) for line in lines)
    assert any(line.startswith("::error file=fixtures/training_step/train.py,line=") and "title=CG111::CG111 " in line for line in lines)


def test_concise_statistics_and_output_file(fixtures, capsys):
    code, out, _ = run(["check", "--format", "concise", "--statistics", "fixtures/training_step"], capsys)
    assert code == 1
    lines = out.splitlines()
    findings = [line for line in lines if line.startswith("fixtures/")]
    assert findings and all(": CG" in line and " [" in line for line in findings)
    assert any(line.split()[1:3] == ["CG111", "error"] for line in lines if line[:5].strip().isdigit())
    assert lines[-1].startswith(f"Found {len(findings)} findings")
    code, out, _ = run(["check", "--format", "concise", "--output-file", "out/report.txt", "fixtures/training_step"], capsys)
    assert code == 1 and out == ""
    assert (fixtures / "out/report.txt").read_text().splitlines()[: len(findings)] == findings
    # ruff's spelling of the option, which its users type first
    code, out, _ = run(["check", "--output-format", "concise", "fixtures/training_step"], capsys)
    assert code == 1 and [line for line in out.splitlines() if line.startswith("fixtures/")] == findings


@pytest.mark.parametrize(
    "env, option, colored",
    [({}, [], False), ({}, ["--color", "always"], True), ({"FORCE_COLOR": "1"}, [], True), ({"FORCE_COLOR": "1", "NO_COLOR": "1"}, [], False), ({"NO_COLOR": "1"}, ["--color", "always"], True)],
)
def test_colour_follows_no_color_and_the_terminal(fixtures, capsys, monkeypatch, env, option, colored):
    for name in ("NO_COLOR", "FORCE_COLOR"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    out = run(["check", *option, "fixtures/training_step"], capsys)[1]
    assert ("\x1b[" in out) == colored


def test_output_format_from_the_environment(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    write_project(tmp_path, {"a.py": "import torch\nwith torch.cuda.graph(g):\n    y = x.item()\n"})
    monkeypatch.setenv("CGLINT_OUTPUT_FORMAT", "concise")
    assert run(["check", "a.py"], capsys)[1].startswith("a.py:3:9: CG101 [error]")
    monkeypatch.setenv("CGLINT_OUTPUT_FORMAT", "xml")
    code, out, err = run(["check", "a.py"], capsys)
    assert code == 2 and "unknown output format 'xml'" in err


# One hazard (a print, CG501) under every form of capture the checker knows.
EVERY_FORM = {
    "forms.py": '''
        import contextlib

        import torch

        from serving.engine import runner_capture

        g = torch.cuda.CUDAGraph()
        x = torch.zeros(4, device="cuda")


        @contextlib.contextmanager
        def graph_capture(graph):
            with torch.cuda.graph(graph):
                yield


        def capture_callable(fn):
            with torch.cuda.graph(g):
                fn()


        def layer(t):
            print("layer")
            return t * 2


        def head():
            print("head")


        @torch.compile(mode="reduce-overhead")
        def compiled(t):
            print("compiled")
            return t + 1


        def decode_step(t):
            print("decode")
            return t - 1


        with torch.cuda.graph(g):
            print("block")
        g.capture_begin()
        print("span")
        g.capture_end()
        graphed = torch.cuda.make_graphed_callables(layer, (x,))
        with graph_capture(g):
            print("helper")
        capture_callable(head)
        with runner_capture(g):
            print("configured helper")
    ''',
}


def test_region_kinds_in_json_name_every_form_of_capture(tmp_path, monkeypatch, capsys):
    """The region kinds are a contract (docs/design.md, JSON output): these exact strings."""
    monkeypatch.chdir(tmp_path)
    write_project(tmp_path, EVERY_FORM)
    (tmp_path / "cglint.toml").write_text('select = ["CG501", "CG508"]\ncapture-functions = ["runner_capture"]\ncaptured = ["decode_step"]\n')
    code, out, _ = run(["check", "--no-cache", "--format", "json", "forms.py"], capsys)
    assert code == 1
    found = {(f["line"], f["region"]["line"], f["region"]["kind"]) for f in json.loads(out)["findings"]}
    assert found == {
        (23, 47, "make_graphed_callables"),
        (28, 50, "capture helper capture_callable"),
        (33, 31, "torch.compile"),
        (38, 37, "captured (configuration)"),
        (43, 42, "torch.cuda.graph"),
        (45, 44, "capture_begin"),
        (49, 48, "capture helper graph_capture"),
        (52, 51, "capture helper serving.engine.runner_capture"),
    }
