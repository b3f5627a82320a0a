"""Adopting cglint in existing code: `--add-noqa` and baselines (`--baseline`, `--update-baseline`)."""
from __future__ import annotations

import json
import textwrap

import pytest

from cglint.cli import main

from .helpers import write_project

STEP = """
import torch

def step(x, y):
    loss = x.pow(2).mean()
    print(loss)
    return loss.item(), y.cpu()  # keep the value

g = torch.cuda.CUDAGraph()
with torch.cuda.graph(g):
    out = step(static_x, static_y)
"""


def run(args, capsys):
    code = main([str(a) for a in args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.fixture
def project(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("CGLINT_OUTPUT_FORMAT", raising=False)
    write_project(tmp_path, {"src/train.py": STEP})
    return tmp_path


def codes(out: str) -> list[tuple[str, int]]:
    return [(f["code"], f["line"]) for f in json.loads(out)["findings"]]


def test_add_noqa_suppresses_every_finding_once(project, capsys):
    path = project / "src/train.py"
    path.write_text(path.read_text().replace("print(loss)", "print(loss)  # noqa: E501"))
    code, _, err = run(["check", "--add-noqa", "src"], capsys)
    assert code == 0 and "Added 3 noqa directives." in err
    lines = path.read_text().splitlines()
    assert lines[4] == "    print(loss)  # noqa: E501, CG103"
    assert lines[5] == "    return loss.item(), y.cpu()  # keep the value  # noqa: CG101, CG102"
    assert run(["check", "src"], capsys)[0] == 0
    text = path.read_text()
    assert run(["check", "--add-noqa", "src"], capsys)[2].strip() == "Added 0 noqa directives."
    assert path.read_text() == text


def test_add_noqa_never_writes_into_a_string_or_after_a_continuation(project, capsys):
    write_project(
        project,
        {
            "src/train.py": '''
            import torch

            def step(x):
                return x.item(), """
                text""", \\
                    x.cpu()

            with torch.cuda.graph(g):
                out = step(static_x)
            ''',
        },
    )
    code, _, err = run(["check", "--add-noqa", "src"], capsys)
    assert code == 0 and "Added 2 noqa directives." in err
    text = (project / "src/train.py").read_text()
    # `x.item()` sits on a line that ends inside a string: its comment goes where Python
    # allows one, at the end of the logical line, which the checker reads for every line of it.
    assert 'return x.item(), """\n    text""", \\\n        x.cpu()  # noqa: CG101, CG102\n' in text
    code, out, _ = run(["check", "--format", "json", "src"], capsys)
    assert code == 0 and codes(out) == []


def test_add_noqa_after_a_backslash_and_inside_a_triple_quoted_f_string(project, capsys):
    write_project(
        project,
        {
            "src/train.py": '''
            import torch

            def step(x):
                y = x.sum().item() + \\
                    1
                msg = f"""value {
                    x.sum().item()
                } done"""
                return x.max().item()

            with torch.cuda.graph(g):
                out = step(static_x)
            ''',
        },
    )
    code, out, _ = run(["check", "--format", "json", "src"], capsys)
    assert codes(out) == [("CG101", 4), ("CG101", 7), ("CG101", 9)]
    code, _, err = run(["check", "--add-noqa", "src"], capsys)
    assert code == 0 and "Added 3 noqa directives." in err and "could not be suppressed" not in err
    lines = (project / "src/train.py").read_text().splitlines()
    assert lines[3:9] == [
        "    y = x.sum().item() + \\",
        "        1  # noqa: CG101",
        '    msg = f"""value {',
        "        x.sum().item()",
        '    } done"""  # noqa: CG101',
        "    return x.max().item()  # noqa: CG101",
    ]
    assert run(["check", "src"], capsys)[0] == 0


def test_add_noqa_names_what_it_could_not_suppress_and_fails(project, capsys):
    write_project(
        project,
        {
            "src/log.py": """
            import torch

            def log(x):
                print("a")
                print("b")

            with torch.cuda.graph(g):
                log(static_x)
            """,
            "src/broken.py": "import torch\nwith torch.cuda.graph(g):\n    x = (1 +\n",
        },
    )
    code, _, err = run(["check", "--add-noqa", "src"], capsys)
    # Both prints of one finding (CG501 aggregates a function's hits) are suppressed at once.
    assert (project / "src/log.py").read_text().count("# noqa: CG501") == 2
    assert code == 1 and "Added 5 noqa directives." in err
    assert "1 finding could not be suppressed with a noqa comment and will still be reported:" in err
    assert "src/broken.py:3:9: CG002 syntax error" in err
    assert "train.py" not in err.split("reported:")[1]
    assert run(["check", "--add-noqa", "--exit-zero", "src"], capsys)[0] == 0


def test_a_noqa_at_the_end_of_a_multi_line_statement_covers_each_of_its_lines(project, capsys):
    write_project(
        project,
        {
            "src/train.py": '''
            import torch

            def step(x, y):
                total = (x.sum().item() +
                         y.cpu().sum())  # noqa: CG101, CG102
                text = f"""{
                    x.max().item()
                }"""  # cglint: ignore[CG101]
                return x.min().item() + \\
                    1  # noqa
                return total, text, x.mean().item()  # noqa: CG102

            with torch.cuda.graph(g):
                out = step(static_x, static_y)
            ''',
        },
    )
    code, out, _ = run(["check", "--format", "json", "src"], capsys)
    assert codes(out) == [("CG101", 11)]


def test_only_new_findings_fail_against_a_baseline(project, capsys):
    code, _, err = run(["check", "--baseline", "cglint-baseline.json", "--update-baseline", "src"], capsys)
    assert code == 0 and "Recorded 3 findings in cglint-baseline.json." in err
    data = json.loads((project / "cglint-baseline.json").read_text())
    assert {(e["path"], e["code"], e["line_text"], e["occurrence"]) for e in data["findings"]} == {
        ("src/train.py", "CG103", "print(loss)", 0),
        ("src/train.py", "CG101", "return loss.item(), y.cpu()", 0),
        ("src/train.py", "CG102", "return loss.item(), y.cpu()", 0),
    }
    code, out, err = run(["check", "--baseline", "cglint-baseline.json", "--format", "json", "src"], capsys)
    assert code == 0 and codes(out) == [] and "3 findings recorded in cglint-baseline.json not shown." in err

    # Unrelated edits: lines added above, re-indentation, comments changed. The baseline holds.
    edited = textwrap.dedent(STEP).replace("import torch\n", "import torch\nimport os\n\n\nSEED = 0\n")
    edited = edited.replace("def step(x, y):\n", "def step(x, y):\n    if True:\n").replace("\n    ", "\n        ")
    edited = edited.replace("# keep the value", "# value kept for the log").replace("        if True:", "    if True:")
    write_project(project, {"src/train.py": edited})
    code, out, _ = run(["check", "--format", "json", "src"], capsys)
    assert sorted(codes(out)) == [("CG101", 11), ("CG102", 11), ("CG103", 10)]
    code, out, _ = run(["check", "--baseline", "cglint-baseline.json", "--format", "json", "src"], capsys)
    assert code == 0 and codes(out) == []

    # A new hazard fails, even one on a line identical to a recorded one.
    write_project(project, {"src/train.py": edited.replace("        print(loss)\n", "        print(loss)\n        print(loss)\n")})
    code, out, _ = run(["check", "--baseline", "cglint-baseline.json", "--format", "json", "src"], capsys)
    assert code == 1 and codes(out) == [("CG103", 11)]


@pytest.mark.parametrize(
    "content, message",
    [(None, "baseline file not found"), ("{not json", "not a cglint baseline file"), ('{"findings": [{"path": 1}]}', "not a cglint baseline file")],
)
def test_a_missing_or_broken_baseline_is_a_usage_error(project, capsys, content, message):
    if content is not None:
        (project / "base.json").write_text(content)
    code, out, err = run(["check", "--baseline", "base.json", "src"], capsys)
    assert code == 2 and message in err and out == ""


def test_update_baseline_needs_a_file_and_modes_exclude_each_other(project, capsys):
    assert run(["check", "--update-baseline", "src"], capsys)[0] == 2
    assert run(["check", "--fix", "--add-noqa", "src"], capsys)[0] == 2
