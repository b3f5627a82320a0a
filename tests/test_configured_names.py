"""CG003: a `captured` or `capture-functions` entry that names nothing is reported where it
is written, with the closest names the code defines; it leaves the exit status alone."""
from __future__ import annotations

import json

from cglint.cli import main

from .helpers import write_project

ENGINE = {
    "serving/runner.py": """
    import torch

    class ModelRunner:
        def execute_model(self, batch):
            n = batch.sum().item()
            return batch * n

        def capture_graphs(self, fn):
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                fn()
            return g
    """,
}


def _check(tmp_path, monkeypatch, capsys, config: str, *extra):
    write_project(tmp_path, ENGINE)
    (tmp_path / "cglint.toml").write_text(config)
    monkeypatch.chdir(tmp_path)
    code = main(["check", "--no-cache", "--format", "json", *extra, "serving"])
    return code, json.loads(capsys.readouterr().out)["findings"]


def test_misspelt_entries_are_reported_with_the_closest_names(tmp_path, monkeypatch, capsys):
    config = 'select = ["CG101"]\ncaptured = [\n  "ModelRunner.execute_modle",\n]\ncapture-functions = ["capture_graph"]\n'
    code, found = _check(tmp_path, monkeypatch, capsys, config)
    assert code == 0  # configuration warnings alone leave the exit status to the findings
    assert [(f["path"], f["line"], f["column"], f["code"], f["severity"], f["message"]) for f in found] == [
        (
            "cglint.toml", 3, 3, "CG003", "warning",
            "`captured` entry `ModelRunner.execute_modle` names no function defined or called in the checked files; "
            "closest defined: `ModelRunner.execute_model`, `execute_model`, `ModelRunner.capture_graphs`",
        ),
        (
            "cglint.toml", 5, 22, "CG003", "warning",
            "`capture-functions` entry `capture_graph` names no function defined or called in the checked files; "
            "closest defined: `capture_graphs`, `ModelRunner.capture_graphs`",
        ),
    ]


def test_entries_that_resolve_are_silent_and_findings_still_fail(tmp_path, monkeypatch, capsys):
    config = 'select = ["CG101"]\ncaptured = ["ModelRunner.execute_model"]\ncapture-functions = ["capture_graphs"]\n'
    code, found = _check(tmp_path, monkeypatch, capsys, config)
    assert code == 1
    assert [(f["path"], f["line"], f["code"]) for f in found] == [("serving/runner.py", 5, "CG101")]
