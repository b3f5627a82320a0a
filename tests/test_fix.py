"""`cglint check --fix` / `--diff` on files: fixes reach the modules a capture calls, a fix that
does not hold is not written, and files keep their encoding, BOM, line endings and
permissions. What each rule's fix writes is on the rule (`fixed`), checked by
tests/test_rule_examples.py."""
from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

import libcst as cst
import pytest

from cglint import fix
from cglint.check import check_paths
from cglint.cli import main
from cglint.config import Config
from cglint.rules.sync import ExplicitSync

from .helpers import write_project

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"


def _fix(tmp_path: Path, text: str, name: str = "train.py"):
    write_project(tmp_path, {name: text})
    return fix.fix_paths([tmp_path / name], Config(root=tmp_path))


def test_fixes_in_modules_reached_from_the_checked_file(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write_project(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/model.py": "import torch\n\ndef step(x):\n    torch.cuda.synchronize()\n    return x * 2\n",
            "pkg/run.py": "import torch\nfrom pkg.model import step\n\nwith torch.cuda.graph(g):\n    y = step(static_x)\n",
        },
    )
    assert main(["check", "--fix", "pkg/run.py"]) == 0
    assert (tmp_path / "pkg/model.py").read_text() == "import torch\n\ndef step(x):\n    return x * 2\n"


def test_a_fix_that_leaves_its_finding_or_breaks_the_file_is_not_written(tmp_path, monkeypatch):
    text = "import torch\n\nwith torch.cuda.graph(g):\n    y = x * 2\n    torch.cuda.synchronize()\n"
    monkeypatch.setattr(ExplicitSync, "fix", lambda self, node, ctx: node.with_changes(), raising=False)
    outcome = _fix(tmp_path, text)
    assert outcome.fixed == 0 and outcome.files == {}
    monkeypatch.setattr(ExplicitSync, "fix", lambda self, node, ctx: cst.Name("not valid"), raising=False)
    outcome = _fix(tmp_path, text)
    assert outcome.fixed == 0 and outcome.files == {}
    assert [f.code for f in outcome.result.findings] == ["CG104"]


SYNC = "import torch\n\nwith torch.cuda.graph(g):\n    y = x * 2\n    torch.cuda.synchronize()\n    z = 'd\u00e9j\u00e0 vu'\n"
SYNC_FIXED = "import torch\n\nwith torch.cuda.graph(g):\n    y = x * 2\n    z = 'd\u00e9j\u00e0 vu'\n"


@pytest.mark.parametrize(
    "encode, decode",
    [
        (lambda t: t.replace("\n", "\r\n").encode(), lambda t: t.replace("\n", "\r\n").encode()),  # CRLF
        (lambda t: b"\xef\xbb\xbf" + t.encode(), lambda t: b"\xef\xbb\xbf" + t.encode()),  # UTF-8 with BOM
        (
            lambda t: ("# -*- coding: latin-1 -*-\n" + t).encode("latin-1"),
            lambda t: ("# -*- coding: latin-1 -*-\n" + t).encode("latin-1"),
        ),
    ],
    ids=["crlf", "bom", "latin-1"],
)
def test_fix_keeps_encoding_line_endings_and_permissions(tmp_path, monkeypatch, capsys, encode, decode):
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "train.py"
    path.write_bytes(encode(SYNC))
    path.chmod(0o754)
    assert main(["check", "--fix", "train.py"]) == 0
    assert path.read_bytes() == decode(SYNC_FIXED)
    assert stat.S_IMODE(path.stat().st_mode) == 0o754
    assert [p.name for p in tmp_path.iterdir()] == ["train.py"]  # no temporary file left behind
    assert "Fixed 1 finding in 1 file." in capsys.readouterr().err


@pytest.mark.skipif(not hasattr(os, "symlink"), reason="no symbolic links")
def test_fix_through_a_symbolic_link_writes_the_target(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "real.py").write_text(SYNC)
    (tmp_path / "link.py").symlink_to(tmp_path / "real.py")
    assert main(["check", "--fix", "link.py"]) == 0
    assert (tmp_path / "link.py").is_symlink()
    assert (tmp_path / "real.py").read_text() == SYNC_FIXED


def test_diff_shows_the_fixes_without_writing(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text(SYNC)
    assert main(["check", "--diff", "train.py"]) == 1
    out, err = capsys.readouterr()
    assert out == (
        "--- a/train.py\n+++ b/train.py\n@@ -2,5 +2,4 @@\n \n with torch.cuda.graph(g):\n     y = x * 2\n"
        "-    torch.cuda.synchronize()\n     z = 'd\u00e9j\u00e0 vu'\n"
    )
    assert "Would fix 1 finding in 1 file." in err
    assert (tmp_path / "train.py").read_text() == SYNC
    (tmp_path / "train.py").write_text(SYNC_FIXED)
    assert main(["check", "--diff", "train.py"]) == 0
    assert capsys.readouterr().out == ""


def test_fix_then_report_what_is_left(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text(SYNC.replace("y = x * 2", "y = x.item()"))
    assert main(["check", "--fix", "--format", "concise", "train.py"]) == 1
    out, err = capsys.readouterr()
    assert out.splitlines()[0].startswith("train.py:4:9: CG101")
    assert "CG104" not in out and "Fixed 1 finding in 1 file." in err


def test_fixing_the_fixtures_leaves_nothing_fixable_and_is_idempotent(tmp_path, monkeypatch, capsys):
    shutil.copytree(FIXTURES, tmp_path / "fixtures")
    monkeypatch.chdir(tmp_path)
    before = {p: p.read_text() for p in sorted(tmp_path.rglob("*.py"))}
    main(["check", "--fix", "fixtures"])
    capsys.readouterr()
    after = {p: p.read_text() for p in before}
    changed = [p for p in before if before[p] != after[p]]
    assert changed, "the fixtures have fixable findings"
    for path in changed:
        cst.parse_module(after[path])
    assert "static_target.copy_(target)" in after[tmp_path / "fixtures/training_step/train.py"]
    result = check_paths([tmp_path / "fixtures"], Config(root=tmp_path))
    assert fix.fixable(result) == set()
    main(["check", "--fix", "fixtures"])
    assert "Nothing to fix." in capsys.readouterr().err
    assert {p: p.read_text() for p in before} == after
