"""`cglint verify` on the compiled-mode fixtures on a GPU: what torch reports about each
compiled function (graph breaks, recompiles, skipped CUDA graphs) and the outputs a later
replay overwrote, at exact lines. The numbers are in bench/verify-compiled.md."""
from __future__ import annotations

import concurrent.futures
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")

REPO = Path(__file__).resolve().parent.parent
FOLDER = REPO / "fixtures" / "compiled_mode"

# (code, line) that a GPU run reports per script. Static markers not here are not seen at run
# time (print() under a branch that never runs); runtime findings not marked are explained below.
EXPECTED = {
    # torch itself raises at line 31 (each new length is a new recording, which releases the kept outputs)
    "decode.py": {("CG603", 17), ("CG203", 18), ("CG703", 27), ("CG956", 28), ("CG956", 31)},
    "decode_clean.py": set(),
    # the changing lr fails the guard on param_groups (line 18) before the one on the argument (no CG604 at 35);
    # the .item() value is guarded too (CG603 at 24); torch raises when the kept losses are stacked (line 38)
    "train.py": {("CG603", 18), ("CG112", 24), ("CG508", 24), ("CG603", 24), ("CG956", 35), ("CG956", 38)},
    "train_clean.py": set(),
    # the in-place clamp_ skips CUDA graphs for the whole graph: no pool, so no output is overwritten (no CG956
    # at 24), and Inductor names only the first reason (no CG957 for the CPU arange at 9)
    "scoring.py": {("CG957", 10)},
    "scoring_clean.py": set(),
}


def verify(script: str, cwd: Path = FOLDER) -> dict:
    done = subprocess.run([sys.executable, "-m", "cglint", "verify", "--format", "json", script], cwd=cwd,
                          capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")})
    try:
        return json.loads(done.stdout)
    except ValueError:
        raise AssertionError(done.stderr[-3000:]) from None


def lines(report: dict, script: str) -> set[tuple[str, int]]:
    return {(f["code"], f["line"]) for f in report["findings"] if f["path"] == script}


@pytest.fixture(scope="module")
def reports() -> dict:
    """Every fixture verified once, at the same time (each compiles for a while on its own)."""
    with concurrent.futures.ThreadPoolExecutor(max_workers=len(EXPECTED)) as pool:
        return dict(zip(sorted(EXPECTED), pool.map(verify, sorted(EXPECTED))))


@pytest.mark.parametrize("script", sorted(EXPECTED))
def test_verify_reports_what_torch_knows_at_the_fixture_lines(script, reports):
    report = reports[script]
    detail = json.dumps({"findings": [(f["code"], f["line"], f["message"][:200]) for f in report["findings"]],
                         "notes": report["notes"], "run": report["run"]}, indent=1)
    assert report["mode"] == "gpu"
    assert lines(report, script) == EXPECTED[script], detail
    assert {f["path"] for f in report["findings"]} <= {script}, detail


KEPT = """
import torch

model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.GELU(), torch.nn.Linear(64, 64)).cuda()
embed = torch.compile(model, mode="reduce-overhead")
with torch.no_grad():
    for _ in range(3):
        embed(torch.randn(8, 64, device="cuda"))
    first = embed(torch.randn(8, 64, device="cuda")){clone}
    second = embed(torch.randn(8, 64, device="cuda"))
    print((first - second).abs().max().item())
"""


@pytest.mark.parametrize("clone", [False, True])
def test_an_output_read_after_the_next_replay_is_reported_at_the_read(tmp_path, clone):
    (tmp_path / "embed.py").write_text(textwrap.dedent(KEPT).replace("{clone}", ".clone()" if clone else ""))
    report = verify("embed.py", tmp_path)
    assert report["run"]["completed"], report["run"]
    assert lines(report, "embed.py") == (set() if clone else {("CG956", 11)}), (report["findings"], report["notes"], report["run"])
