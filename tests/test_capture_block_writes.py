"""CG504 has one meaning in both halves: a host container changed by code a capture calls.
The capture block's own statements run once, at capture, by construction (registering static
outputs), so neither `check` nor `verify` reports an append written directly in the block."""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from cglint.api import check_source

SCRIPT = textwrap.dedent('''
    import torch

    history = []
    outputs = []

    def step(x):
        out = x * 2
        history.append(out)
        return out

    x = torch.randn(4, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            step(x)
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out = step(x)
        outputs.append(out)
    for _ in range(3):
        g.replay()
''')


def test_check_reports_the_called_append_only():
    found = {(f.code, f.line) for f in check_source(SCRIPT, "job.py") if f.code == "CG504"}
    assert found == {("CG504", 9)}


def test_verify_agrees_with_check(tmp_path):
    pytest.importorskip("torch")
    (tmp_path / "job.py").write_text(SCRIPT)
    done = subprocess.run([sys.executable, "-m", "cglint", "verify", "--format", "json", "job.py"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
    report = json.loads(done.stdout)
    assert report["run"]["completed"], done.stderr
    assert {(f["code"], f["line"]) for f in report["findings"] if f["code"] == "CG504"} == {("CG504", 9)}
