"""The result cache answers unchanged runs and misses whenever any file it read changed."""
from __future__ import annotations

import json
import os

import pytest

from cglint.cli import main

from .helpers import write_project

RUN = """
import torch
from model import forward

with torch.cuda.graph(g):
    y = forward(static_x)
"""


def check_json(args, capsys) -> list:
    main(["check", "--format", "json", "--exit-zero", *args])
    return json.loads(capsys.readouterr().out)["findings"]


@pytest.fixture
def project(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write_project(tmp_path, {"run.py": RUN, "model.py": "def forward(x):\n    return x.cpu()\n"})
    return tmp_path


def test_warm_run_gives_the_same_findings_from_the_cache(project, capsys):
    cold = check_json(["run.py"], capsys)
    entries = list((project / ".cglint_cache").glob("*.json"))
    assert len(entries) == 1 and cold[0]["code"] == "CG102"
    assert check_json(["run.py"], capsys) == cold
    assert check_json(["--no-cache", "run.py"], capsys) == cold


def test_editing_a_callee_outside_the_checked_files_invalidates(project, capsys):
    assert [f["code"] for f in check_json(["run.py"], capsys)] == ["CG102"]
    (project / "model.py").write_text("def forward(x):\n    return x.nonzero()\n")
    assert [f["code"] for f in check_json(["run.py"], capsys)] == ["CG105"]
    (project / "model.py").write_text("def forward(x):\n    return x * 2\n")
    assert check_json(["run.py"], capsys) == []


def test_options_are_part_of_the_key(project, capsys):
    assert check_json(["run.py"], capsys)
    assert check_json(["--ignore", "CG102", "run.py"], capsys) == []


def test_corrupt_or_read_only_cache_is_ignored(project, capsys):
    cold = check_json(["run.py"], capsys)
    for entry in (project / ".cglint_cache").glob("*.json"):
        entry.write_text("{not json")
    assert check_json(["run.py"], capsys) == cold
    folder = project / ".cglint_cache"
    os.chmod(folder, 0o500)
    try:
        (project / "model.py").write_text("def forward(x):\n    return x.tolist()\n")
        assert [f["code"] for f in check_json(["run.py"], capsys)] == ["CG102"]
    finally:
        os.chmod(folder, 0o700)
