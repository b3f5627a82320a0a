"""One configuration, the same findings through every entry point: the command line, the
Python API (paths and source text) and the flake8 plugin all decide which codes to report,
which files ignore which codes, and which lines suppress them, through one selection."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from cglint import api
from cglint.cli import main
from cglint.flake8_plugin import CglintChecker

from .helpers import write_project

# A training step captured whole, and a legacy copy of it that per-file-ignores quiets.
TRAIN = """
import logging

import torch

log = logging.getLogger(__name__)


def train_step(model, opt, x, y):
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    opt.step()
    print("stepped")
    log.info("loss computed")
    host = loss.cpu()
    total = loss.item()
    print("done")  # noqa: CG501
    return total, host


model = torch.nn.Linear(4, 4).cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
static_x = torch.zeros(8, 4, device="cuda")
static_y = torch.zeros(8, 4, device="cuda")
g = torch.cuda.CUDAGraph()
with torch.cuda.graph(g):
    out = train_step(model, opt, static_x, static_y)
"""

CONFIG = """
select = ["host-effect"]
extend-select = ["CG101"]
ignore = ["CG502"]

[per-file-ignores]
"legacy/*.py" = ["CG501"]
"""

# host-effect (CG5xx) without CG502, plus CG101 from extend-select; CG102 is not selected;
# the line that says `noqa: CG501` and CG501 in legacy/ are not reported.
EXPECTED = {
    ("train.py", 12, "CG501"),
    ("train.py", 15, "CG101"),
    ("legacy/train.py", 15, "CG101"),
}


@pytest.fixture
def project(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write_project(tmp_path, {"cglint.toml": CONFIG, "train.py": TRAIN, "legacy/train.py": TRAIN})
    return tmp_path


def _seen(findings) -> set[tuple[str, int, str]]:
    return {(Path(f.path).as_posix(), f.line, f.code) for f in findings}


def test_command_line(project, capsys):
    assert main(["check", "--no-cache", "--format", "json", "."]) == 1
    found = json.loads(capsys.readouterr().out)["findings"]
    assert {(f["path"], f["line"], f["code"]) for f in found} == EXPECTED


def test_api_check(project):
    assert _seen(api.check(["."]).findings) == EXPECTED


def test_api_check_source(project):
    found = set()
    for name in ("train.py", "legacy/train.py"):
        config = api.load_config(None, project / name)
        found |= {(name, f.line, f.code) for f in api.check_source(TRAIN.lstrip("\n"), project / name, config=config)}
    assert found == EXPECTED


def test_flake8_plugin(project):
    found = set()
    for name in ("train.py", "legacy/train.py"):
        lines = (project / name).read_text().splitlines(keepends=True)
        found |= {(name, line, message.split()[0]) for line, _, message, _ in CglintChecker(None, name, lines).run()}
    assert found == EXPECTED


def test_api_overrides_combine_as_the_command_line_options_do(project, capsys):
    # --select replaces `select`; --ignore and --extend-select add to the configured lists,
    # and an extended code is reported even where an ignore names it (README, Configuration).
    assert main(["check", "--no-cache", "--format", "json", "--select", "sync", "--extend-select", "CG502", "--ignore", "CG102", "."]) == 1
    cli = {(f["path"], f["line"], f["code"]) for f in json.loads(capsys.readouterr().out)["findings"]}
    assert cli == {("train.py", 13, "CG502"), ("train.py", 15, "CG101"), ("legacy/train.py", 13, "CG502"), ("legacy/train.py", 15, "CG101")}
    assert _seen(api.check(["."], select=["sync"], extend_select=["CG502"], ignore=["CG102"]).findings) == cli
