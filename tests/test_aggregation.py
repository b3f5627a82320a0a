"""Host effects repeated in one function are one finding, with the other lines as related
locations in every output format and in the cache."""
from __future__ import annotations

import json

from cglint.cli import main

from .helpers import write_project

ENGINE = '''
import logging
import torch

logger = logging.getLogger(__name__)


class Engine:
    def step(self, x):
        logger.debug("step start")
        y = x * 2
        logger.debug("scaled %s", y.shape)
        logger.info("done")  # noqa: CG502
        print("step")
        return y

    def finish(self, y):
        logger.debug("finish")
        return y + 1


engine = Engine()
g = torch.cuda.CUDAGraph()
x = torch.zeros(4, device="cuda")
with torch.cuda.graph(g):
    out = engine.finish(engine.step(x))
'''


def _run(args, capsys):
    code = main([str(a) for a in args])
    return code, capsys.readouterr().out


def test_one_finding_per_function_and_rule_with_the_other_lines_related(tmp_path, monkeypatch, capsys):
    write_project(tmp_path, {"engine.py": ENGINE})
    monkeypatch.chdir(tmp_path)
    code, out = _run(["check", "--select", "host-effect", "--format", "json", "engine.py"], capsys)
    assert code == 1
    found = {(f["line"], f["code"], f["severity"], tuple((r["line"], r["message"]) for r in f.get("related", ()))) for f in json.loads(out)["findings"]}
    assert found == {
        (9, "CG502", "info", ((11, 'also `logger.debug("scaled %s", y.shape)`'),)),  # line 12 is suppressed
        (13, "CG501", "info", ()),
        (17, "CG502", "info", ()),  # another function: its own finding
    }
    step = next(f for f in json.loads(out)["findings"] if f["line"] == 9)
    assert step["message"].endswith("(and 1 more in this function: line 11)")

    code, warm = _run(["check", "--select", "host-effect", "--format", "json", "engine.py"], capsys)
    assert json.loads(warm) == json.loads(out)  # the cache keeps related locations


def test_related_locations_in_sarif_and_text(tmp_path, monkeypatch, capsys):
    write_project(tmp_path, {"engine.py": ENGINE})
    monkeypatch.chdir(tmp_path)
    _, out = _run(["check", "--no-cache", "--select", "CG502", "--format", "sarif", "engine.py"], capsys)
    results = json.loads(out)["runs"][0]["results"]
    step = next(r for r in results if r["locations"][0]["physicalLocation"]["region"]["startLine"] == 9)
    related = [(loc["id"], loc["physicalLocation"]["region"]["startLine"], loc["message"]["text"]) for loc in step["relatedLocations"]]
    assert related == [(1, 24, "captured by torch.cuda.graph"), (2, 11, 'also `logger.debug("scaled %s", y.shape)`')]

    _, text = _run(["check", "--no-cache", "--select", "CG502", "engine.py"], capsys)
    assert '  = see: engine.py:11:9: also `logger.debug("scaled %s", y.shape)`' in text.splitlines()
