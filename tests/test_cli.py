"""The command line as users and CI run it: output formats, selection, suppression,
configuration, exit codes and bad input."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap

import pytest

from cglint.cli import main

from .helpers import write_project

STEP = """
import torch

def step(x):
    loss = x.pow(2).mean()
    print(loss)
    return loss.item()

g = torch.cuda.CUDAGraph()
with torch.cuda.graph(g):
    out = step(static_x)
"""


def run(args, capsys) -> tuple[int, str, str]:
    code = main([str(a) for a in args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.fixture
def project(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("CGLINT_OUTPUT_FORMAT", raising=False)
    write_project(tmp_path, {"src/train.py": STEP, "src/clean.py": "import torch\n\ndef f(x):\n    return x.item()\n"})
    return tmp_path


def test_json_output_follows_the_contract(project, capsys):
    code, out, _ = run(["check", "--format", "json", "src"], capsys)
    assert code == 1
    data = json.loads(out)
    assert set(data) == {"version", "findings", "files_checked"}
    assert data["files_checked"] == 2
    first = data["findings"][0]
    assert set(first) == {
        "path", "line", "column", "end_line", "end_column", "code", "category", "severity",
        "message", "fix_hint", "region", "trace",
    }
    assert [(f["path"], f["line"], f["code"]) for f in data["findings"]] == [
        ("src/train.py", 5, "CG103"),
        ("src/train.py", 6, "CG101"),
    ]
    assert first["column"] == 5 and first["end_column"] == 16 and first["category"] == "sync"
    assert first["region"] == {"path": "src/train.py", "line": 9, "kind": "torch.cuda.graph"}
    assert first["trace"] == ["src/train.py:9 with torch.cuda.graph(g)", "src/train.py:10 step(static_x)", "src/train.py:3 step"]


def test_text_output_shows_source_caret_chain_and_summary(project, capsys):
    code, out, _ = run(["check", "src/train.py"], capsys)
    assert code == 1
    assert "src/train.py:6:12: CG101 [error]" in out
    assert "6 |     return loss.item()" in out
    assert "  |            ^^^^^^^^^^^" in out
    assert "= captured: src/train.py:9 with torch.cuda.graph(g) -> src/train.py:10 step(static_x) -> src/train.py:3 step" in out
    assert "Found 2 findings (2 errors) in 1 file; 1 file checked; 1 capture followed into 1 function." in out
    assert "\x1b[" not in out  # no colour when not a terminal


@pytest.mark.parametrize(
    "option, expected",
    [
        (["--select", "CG101"], {"CG101"}),
        (["--select", "CG1"], {"CG101", "CG103"}),
        (["--select", "sync"], {"CG101", "CG103"}),
        (["--ignore", "CG103"], {"CG101"}),
        (["--select", "control-flow"], set()),
        (["--select", "sync", "--ignore", "CG10"], set()),
    ],
)
def test_select_and_ignore_by_code_prefix_and_category(project, capsys, option, expected):
    code, out, _ = run(["check", "--format", "json", *option, "src"], capsys)
    assert {f["code"] for f in json.loads(out)["findings"]} == expected
    assert code == (1 if expected else 0)


def test_exit_zero_and_output_file(project, capsys):
    code, out, _ = run(["check", "--exit-zero", "--format", "json", "--output-file", "report/out.json", "src"], capsys)
    assert code == 0 and out == ""
    assert len(json.loads((project / "report/out.json").read_text())["findings"]) == 2


def test_suppression_comments(project, capsys):
    source = STEP.replace("print(loss)", "print(loss)  # noqa: CG103").replace(
        "return loss.item()", "return loss.item()  # cglint: ignore[CG101]"
    )
    write_project(project, {"src/train.py": source})
    assert run(["check", "src"], capsys)[0] == 0
    write_project(project, {"src/train.py": source.replace("# noqa: CG103", "# noqa: E501")})
    code, out, _ = run(["check", "--format", "json", "src"], capsys)
    assert code == 1 and [f["code"] for f in json.loads(out)["findings"]] == ["CG103"]
    write_project(project, {"src/train.py": "# cglint: skip-file\n" + STEP})
    assert run(["check", "src"], capsys)[0] == 0


def test_suppression_comments_take_category_names_as_select_does(project, capsys):
    """`--select sync` chooses the sync rules; `# noqa: sync` suppresses them (it was read
    as an unknown code and suppressed nothing, silently)."""
    source = STEP.replace("print(loss)", "print(loss)  # noqa: sync").replace("return loss.item()", "return loss.item()  # cglint: ignore[Sync]")
    write_project(project, {"src/train.py": source})
    assert run(["check", "src"], capsys)[0] == 0
    write_project(project, {"src/train.py": source.replace("# noqa: sync", "# noqa: control-flow").replace("ignore[Sync]", "ignore[cpu-rng, E501]")})
    code, out, _ = run(["check", "--format", "json", "src"], capsys)
    assert [f["code"] for f in json.loads(out)["findings"]] == ["CG103", "CG101"]
    code, _, err = run(["check", "--add-noqa", "src"], capsys)  # merged next to the category that does not cover it
    assert code == 0 and "# noqa: control-flow, CG103" in (project / "src/train.py").read_text()


@pytest.mark.parametrize(
    "config, words",
    [
        ('ignore = ["XX1"]', "`ignore`: unknown rule selector 'XX1'"),
        ('select = ["sync", "XX1"]', "`select`: unknown rule selector 'XX1'"),
        ('extend-select = ["XX1"]', "`extend-select`: unknown rule selector 'XX1'"),
        ('per-file-ignores = { "a.py" = ["XX1"] }', "per-file-ignores['a.py']: unknown rule selector 'XX1'"),
    ],
)
def test_a_bad_selector_in_the_configuration_names_the_file_and_the_key(project, capsys, config, words):
    (project / "pyproject.toml").write_text(f"[tool.cglint]\n{config}\n")
    code, out, err = run(["check", "src"], capsys)
    assert (code, out) == (2, "") and err.startswith(f"cglint: error: {project / 'pyproject.toml'} [tool.cglint]: {words}")


@pytest.mark.parametrize("option", ["--select", "--extend-select", "--ignore"])
def test_a_bad_selector_on_the_command_line_names_the_option(project, capsys, option):
    code, out, err = run(["check", option, "sync,XX1", "src"], capsys)
    assert (code, out) == (2, "") and err.startswith(f"cglint: error: {option}: unknown rule selector 'XX1'")


@pytest.mark.parametrize("name", ["tensor-to-scalar", "CG101", "cg101", "Tensor-To-Scalar"])
def test_rule_takes_the_names_rules_shows(capsys, name):
    assert run(["rules"], capsys)[1].splitlines()[4].startswith("CG101  sync           error    tensor-to-scalar: ")
    code, out, _ = run(["rule", name], capsys)
    assert code == 0 and out.startswith("## CG101 `tensor-to-scalar` (sync, error)")
    assert run(["rule", "unreadable-file"], capsys)[1].startswith("CG001 unreadable-file: ")
    code, _, err = run(["rule", "no-such-rule"], capsys)
    assert code == 2 and "unknown rule 'no-such-rule': give a code (CG101) or a rule name" in err


def test_color_always_colours_the_concise_format_too(project, capsys):
    code, out, _ = run(["check", "--format", "concise", "--color", "always", "src"], capsys)
    assert code == 1 and "\x1b[1msrc/train.py:6:12:\x1b[0m \x1b[1;31mCG101 [error]\x1b[0m `loss.item()`" in out
    code, out, _ = run(["check", "--format", "concise", "--color", "never", "src"], capsys)
    assert "\x1b[" not in out and "src/train.py:6:12: CG101 [error] `loss.item()`" in out


def test_configuration_in_pyproject(project, capsys):
    (project / "pyproject.toml").write_text(
        textwrap.dedent(
            """
            [tool.cglint]
            ignore = ["CG103"]
            per-file-ignores = { "src/legacy/*.py" = ["sync"] }
            extend-exclude = ["src/generated"]
            """
        )
    )
    write_project(project, {"src/legacy/old.py": STEP, "src/generated/gen.py": STEP})
    code, out, _ = run(["check", "--format", "json", "."], capsys)
    data = json.loads(out)
    assert [(f["path"], f["code"]) for f in data["findings"]] == [("src/train.py", "CG101")]
    assert data["files_checked"] == 3


def test_configured_capture_helpers(project, capsys):
    write_project(
        project,
        {
            "cglint.toml": 'capture-functions = ["engine_capture"]\ncaptured = ["serve.decode"]\n',
            "src/serve.py": """
                from engine import engine_capture

                def decode(x):
                    return x.cpu()

                def warm(x):
                    with engine_capture():
                        x.nonzero()
            """,
        },
    )
    code, out, _ = run(["check", "--format", "json", "--select", "CG102,CG105", "src/serve.py"], capsys)
    assert {(f["line"], f["code"]) for f in json.loads(out)["findings"]} == {(4, "CG102"), (8, "CG105")}


@pytest.mark.parametrize(
    "config, message",
    [
        ('[tool.cglint]\nselct = ["CG1"]\n', "unknown setting 'selct'"),
        ("[tool.cglint]\nselect = CG1\n", "invalid TOML"),
        ('[tool.cglint]\nselect = "CG1"\n', "`select` must be a list of strings"),
        ('[tool.cglint]\nselect = ["CG999"]\n', "unknown rule selector 'CG999'"),
    ],
)
def test_broken_configuration_exits_2_with_a_clear_message(project, capsys, config, message):
    (project / "pyproject.toml").write_text(config)
    code, out, err = run(["check", "src"], capsys)
    assert code == 2 and message in err and out == ""


def test_usage_errors_exit_2(project, capsys):
    assert run(["check", "--select", "CG9x9", "src"], capsys)[0] == 2
    with pytest.raises(SystemExit) as exc:
        main(["check", "--format", "xml"])
    assert exc.value.code == 2
    assert run(["rule", "CG999"], capsys)[0] == 2


def test_unreadable_and_unparsable_files_are_findings_and_the_run_goes_on(project, capsys):
    (project / "src/broken.py").write_text("import torch\ng = torch.cuda.CUDAGraph()\ndef f(:\n    pass\n")
    (project / "src/latin.py").write_bytes(b"x = '\xe9t\xe9'\n")
    (project / "src/cookie.py").write_bytes(b"# -*- coding: latin-1 -*-\nx = '\xe9t\xe9'\n")
    (project / "src/bom.py").write_bytes(b"\xef\xbb\xbf" + STEP.encode())
    code, out, _ = run(["check", "--format", "json", "src"], capsys)
    found = {(f["path"], f["code"], f["line"]) for f in json.loads(out)["findings"]}
    assert ("src/broken.py", "CG002", 3) in found
    assert ("src/latin.py", "CG001", 1) in found
    assert not any(path == "src/cookie.py" for path, _, _ in found)
    assert ("src/bom.py", "CG101", 7) in found and ("src/train.py", "CG101", 6) in found
    assert code == 1


@pytest.mark.parametrize("extra", [[], ["--exit-zero"], ["--format", "json"], ["--fix"]])
def test_a_path_that_does_not_exist_is_a_usage_error(project, capsys, extra):
    # As in ruff: a mistyped path in a CI step must fail it, --exit-zero or not.
    code, out, err = run(["check", *extra, "src", "nope/"], capsys)
    assert (code, out, err) == (2, "", "cglint: error: path not found: nope/\n")


def test_a_broken_symbolic_link_named_on_the_command_line_is_an_unreadable_file(project, capsys):
    (project / "gone.py").symlink_to(project / "nowhere.py")
    code, out, _ = run(["check", "--format", "json", "gone.py"], capsys)
    (finding,) = json.loads(out)["findings"]
    assert code == 1 and finding["code"] == "CG001" and "broken symbolic link" in finding["message"]


def test_syntax_errors_are_reported_where_a_capture_could_be_or_a_region_reaches(project, capsys):
    # A file with a capture form and a module a region calls into are parsed: both report
    # CPython's message at the line and column of the unclosed bracket. A file with no
    # capture form that nothing reaches is never parsed (README, "Syntax errors").
    broken = "    y = foo(x\n\nz = 1\n"
    (project / "src/captured.py").write_text("import torch\n\ng = torch.cuda.CUDAGraph()\nwith torch.cuda.graph(g):\n" + broken)
    (project / "src/app.py").write_text(
        "import torch\nfrom reached import step\n\ng = torch.cuda.CUDAGraph()\nwith torch.cuda.graph(g):\n    step(1)\n"
    )
    (project / "src/reached.py").write_text("import os\n\n\nif os.sep:\n" + broken)
    (project / "src/plain.py").write_text("import os\n\n\nif os.sep:\n" + broken)
    paths = ["src/app.py", "src/captured.py", "src/plain.py", "src/reached.py"]
    code, out, _ = run(["check", "--no-cache", "--format", "json", *paths], capsys)
    found = [(f["path"], f["line"], f["column"], f["code"], f["message"]) for f in json.loads(out)["findings"]]
    assert found == [
        ("src/captured.py", 5, 12, "CG002", "syntax error: '(' was never closed"),
        ("src/reached.py", 5, 12, "CG002", "syntax error: '(' was never closed"),
    ]
    code, out, _ = run(["check", "--no-cache", "src/captured.py"], capsys)
    assert "5 |     y = foo(x\n  |            ^\n" in out


def test_a_syntax_error_only_libcst_sees_is_worded_without_its_parser_prefix():
    from cglint import source

    # CPython accepted the text (as for a function cut from a parsed file): libcst's own
    # words, without "parser error: error at L:C:" repeating the position.
    error = source.parse("def f(:\n    pass\n", cpython_accepts=True)
    assert isinstance(error, source.SourceError) and error.code == "CG002"
    assert error.message.startswith("syntax error: expected one of ") and "error at" not in error.message


def test_rule_and_rules_commands(capsys):
    code, out, _ = run(["rule", "cg101"], capsys)
    assert code == 0
    assert out.startswith("## CG101 `tensor-to-scalar` (sync, error)")
    assert "**Why is this bad?**" in out and "**Use instead**" in out
    code, out, _ = run(["rules"], capsys)
    assert code == 0
    lines = out.splitlines()
    assert any(line.startswith("CG101  sync") for line in lines)
    assert any(line.startswith("CG401  realloc        warning") for line in lines)


def test_rule_is_rendered_on_a_terminal_and_plain_markdown_when_piped(capsys, monkeypatch):
    from cglint import catalogue
    from cglint.docs import RuleDoc

    markdown = RuleDoc.of(catalogue.by_code()["CG101"]).markdown()
    monkeypatch.delenv("FORCE_COLOR", raising=False)
    monkeypatch.delenv("TTY_COMPATIBLE", raising=False)
    assert run(["rule", "CG101"], capsys) == (0, markdown, "")

    monkeypatch.setenv("FORCE_COLOR", "1")  # rich then treats the output as a terminal
    monkeypatch.setenv("COLUMNS", "100")
    code, out, _ = run(["rule", "CG101"], capsys)
    assert code == 0 and "\x1b[" in out
    text = "\n".join(line.rstrip() for line in re.sub(r"\x1b\[[0-9;]*m", "", out).splitlines())
    assert "## CG101" not in text and "**What it does.**" not in text
    assert "CG101 tensor-to-scalar (sync, error)" in text
    assert "What it does. Reads a tensor element into a Python number: .item()" in text


def test_static_check_never_imports_torch(tmp_path):
    # A poisoned torch on the path: importing it fails the run.
    write_project(tmp_path, {"torch/__init__.py": "raise ImportError('the checker imported torch')\n", "app/train.py": STEP})
    env = dict(os.environ, PYTHONPATH=str(tmp_path))
    done = subprocess.run(
        [sys.executable, "-c", "import sys; from cglint.cli import main; code = main(['check', 'app']); "
         "assert 'torch' not in sys.modules; sys.exit(code)"],
        cwd=tmp_path, env=env, capture_output=True, text=True,
    )
    assert done.returncode == 1, done.stderr
    assert "CG101" in done.stdout


def test_console_script_runs(tmp_path):
    write_project(tmp_path, {"train.py": STEP})
    done = subprocess.run([sys.executable, "-m", "cglint", "check", "train.py", "--format", "concise"], cwd=tmp_path, capture_output=True, text=True)
    assert done.returncode == 1
    assert done.stdout.splitlines()[0].startswith("train.py:5:5: CG103 [error]")


def test_jobs_do_not_change_the_findings(project, capsys):
    files = {f"src/pkg/m{i}.py": f"def f{i}(x):\n    return x + {i}\n" for i in range(70)}
    files["src/pkg/m7.py"] = "import torch\ng = torch.cuda.CUDAGraph()\ndef f(:\n"
    write_project(project, files)
    results = []
    for jobs in ("1", "2"):
        code, out, _ = run(["check", "--no-cache", "--format", "json", "--jobs", jobs, "src"], capsys)
        results.append((code, json.loads(out)["findings"]))
    assert results[0] == results[1]
    assert ("src/pkg/m7.py", "CG002") in {(f["path"], f["code"]) for f in results[0][1]}


def test_a_reader_that_leaves_early_gets_no_traceback():
    # `cglint rules | head -1`: the pipe is closed before cglint writes (it is still starting).
    import subprocess
    import sys

    for command in (["rules"], ["verify", "--help"]):
        process = subprocess.Popen([sys.executable, "-m", "cglint", *command], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        process.stdout.close()
        assert process.wait() == 0
        assert process.stderr.read() == b""
        process.stderr.close()
