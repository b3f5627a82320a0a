"""cglint inside other tools: the Python API editors call, and the real flake8 with the plugin."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from cglint.api import check, check_source, fix_source

from .helpers import write_project

CAPTURE = "import torch\n\nfrom model import step\n\ng = torch.cuda.CUDAGraph()\nwith torch.cuda.graph(g):\n    out = step(static_x)\n"
MODEL = "import torch\n\ndef step(x):\n    torch.cuda.synchronize()\n    return x.sum().item()\n"


def test_check_source_reads_unsaved_text_and_resolves_its_imports(tmp_path):
    write_project(tmp_path, {"model.py": MODEL, "run.py": "print('not this text')\n"})
    findings = check_source(CAPTURE, tmp_path / "run.py")
    assert [(Path(f.path).name, f.line, f.code) for f in findings] == [("model.py", 4, "CG104"), ("model.py", 5, "CG101")]
    assert check_source(CAPTURE, tmp_path / "run.py", select=["CG101"])[0].trace[-1].endswith("step")
    assert check_source(CAPTURE, tmp_path / "run.py", ignore=["sync"]) == []


def test_check_paths_and_fix_source(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write_project(tmp_path, {"model.py": MODEL, "run.py": CAPTURE})
    result = check(["run.py"])
    assert result.files_checked == 1 and {f.code for f in result.findings} == {"CG101", "CG104"}
    text = "import torch\n\nwith torch.cuda.graph(g):\n    y = x * 2\n    torch.cuda.synchronize()\n"
    assert fix_source(text, "snippet.py") == "import torch\n\nwith torch.cuda.graph(g):\n    y = x * 2\n"
    assert not (tmp_path / "snippet.py").exists()


def _flake8(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    pytest.importorskip("flake8")
    return subprocess.run([sys.executable, "-m", "flake8", *args], cwd=cwd, capture_output=True, text=True, timeout=300)


def test_flake8_reports_cg_codes(tmp_path):
    write_project(tmp_path, {"model.py": MODEL, "app.py": CAPTURE.replace("out = step(static_x)", "out = static_x.item()  # noqa: CG101\n    y = static_x.cpu()\n    print(step(static_x))")})
    done = _flake8(tmp_path, "--select", "CG1", "app.py")
    assert done.returncode == 1, done.stderr
    # flake8's own `noqa: CG101` comment and cglint's agree; hazards in model.py are that file's findings.
    assert [line.split(" ")[:2] for line in done.stdout.splitlines()] == [["app.py:8:9:", "CG102"]]
    assert "copies a tensor" in done.stdout
    # Only CG codes when asked for them; the plugin is listed under its name.
    assert _flake8(tmp_path, "--select", "E9", "app.py").stdout == ""
    assert "cglint" in _flake8(tmp_path, "--version").stdout


def test_flake8_respects_cglint_configuration_and_reads_stdin(tmp_path):
    write_project(tmp_path, {"model.py": MODEL, "app.py": CAPTURE.replace("out = step(static_x)", "y = static_x.cpu()\n    z = static_x.item()")})
    (tmp_path / "cglint.toml").write_text('ignore = ["CG102"]\n')
    done = _flake8(tmp_path, "--select", "CG", "app.py")
    assert [line.split(" ")[:2] for line in done.stdout.splitlines()] == [["app.py:8:9:", "CG101"]]
    # An editor's unsaved buffer on stdin: its text is checked, not the file on disk.
    text = (tmp_path / "app.py").read_text()
    (tmp_path / "app.py").write_text("import torch\n")
    done = subprocess.run(
        [sys.executable, "-m", "flake8", "--select", "CG", "--stdin-display-name", "app.py", "-"],
        cwd=tmp_path, input=text, capture_output=True, text=True, timeout=300,
    )
    assert [line.split(" ")[:2] for line in done.stdout.splitlines()] == [["app.py:8:9:", "CG101"]]
