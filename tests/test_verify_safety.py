"""`cglint verify` when the script misbehaves: it raises (even an exception that cannot be
printed), exits, is interrupted, closes the output streams, does not parse, or needs a GPU
this machine lacks. Each is reported clearly and the report of what was seen still comes out."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from .helpers import expected_markers

torch = pytest.importorskip("torch")

from cglint.verify.run import cli  # noqa: E402

cpu_only = pytest.mark.skipif(torch.cuda.is_available(), reason="tests the CPU trace mode")

# A capture with a hazard seen before the script goes wrong on the line marked BREAK.
CAPTURED = """
import os, signal, sys
import torch

g = torch.cuda.CUDAGraph()
x = torch.ones(4)
with torch.cuda.graph(g):
    y = x.sum().item()
    BREAK
"""
HAZARD_LINE = 8


def script(body: str) -> str:
    return textwrap.dedent(CAPTURED).replace("BREAK", body)


def verify_in_process(tmp_path, monkeypatch, capsys, text: str, fmt: str = "json"):
    (tmp_path / "job.py").write_text(text)
    monkeypatch.chdir(tmp_path)
    code = cli.main(["--format", fmt, "job.py"])
    out, err = capsys.readouterr()
    return code, out, err


def verify_process(tmp_path, text: str, *args: str):
    (tmp_path / "job.py").write_text(text)
    return subprocess.run(
        [sys.executable, "-m", "cglint", "verify", *args, "job.py"], cwd=tmp_path, capture_output=True, text=True,
        timeout=180, env={**os.environ, "NO_COLOR": "1"},
    )


def hazards(out: str) -> set[tuple[str, int]]:
    return {(f["code"], f["line"]) for f in json.loads(out)["findings"]}


@cpu_only
@pytest.mark.parametrize(
    "body, status",
    [
        ("raise ValueError('boom in capture')", "raised ValueError: boom in capture"),
        ("sys.exit(3)", "exited with status 3"),
        ("sys.exit('fatal: no data')", "exited with status fatal: no data"),
        ("raise KeyboardInterrupt", "was interrupted (KeyboardInterrupt)"),
    ],
)
def test_script_that_fails_inside_a_capture_still_gets_its_report(tmp_path, monkeypatch, capsys, body, status):
    code, out, err = verify_in_process(tmp_path, monkeypatch, capsys, script(body))
    assert code == 1
    assert hazards(out) == {("CG101", HAZARD_LINE)}  # what was seen before the failure
    assert f"the script {status}" in err
    assert "1 capture(s)" in err


@cpu_only
def test_exit_zero_inside_a_capture_is_a_clean_exit_with_findings(tmp_path, monkeypatch, capsys):
    code, out, err = verify_in_process(tmp_path, monkeypatch, capsys, script("sys.exit(0)"))
    assert code == 1 and hazards(out) == {("CG101", HAZARD_LINE)}  # exit 1: there are findings
    assert "cglint verify: the script" not in err  # a clean exit is no failure of the script


@cpu_only
def test_exception_whose_message_cannot_be_printed(tmp_path, monkeypatch, capsys):
    body = "class E(Exception):\n        def __str__(self):\n            raise RuntimeError('no str')\n    raise E()"
    code, out, err = verify_in_process(tmp_path, monkeypatch, capsys, script(body))
    assert code == 1 and hazards(out) == {("CG101", HAZARD_LINE)}
    assert "the script raised E" in err


@cpu_only
def test_script_that_does_not_parse(tmp_path, monkeypatch, capsys):
    code, out, err = verify_in_process(tmp_path, monkeypatch, capsys, "def f(:\n    pass\n")
    assert code == 1 and json.loads(out)["findings"] == []
    assert "raised SyntaxError" in err


@cpu_only
def test_no_gpu_is_said_clearly(tmp_path, monkeypatch, capsys):
    code, out, err = verify_in_process(tmp_path, monkeypatch, capsys, script("pass"), fmt="text")
    assert code == 1 and "CG101" in out
    assert "CPU trace mode" in err and "not checked: real capture errors, replay results" in err
    assert "Run on a GPU machine" in err


@cpu_only
def test_script_that_asks_for_cuda_is_reported_as_needing_a_gpu(tmp_path, monkeypatch, capsys):
    code, out, err = verify_in_process(tmp_path, monkeypatch, capsys, script("free, total = torch.cuda.mem_get_info()"))
    assert code == 1 and hazards(out) == {("CG101", HAZARD_LINE)}
    assert "CUDA feature the CPU emulation does not cover" in err


@cpu_only
def test_interrupt_signal_during_capture(tmp_path):
    # (A process started in the background by a shell ignores SIGINT: Python then raises nothing.)
    interrupt = "signal.signal(signal.SIGINT, signal.default_int_handler); os.kill(os.getpid(), signal.SIGINT)"
    done = verify_process(tmp_path, script(interrupt), "--format", "json")
    assert done.returncode == 1, done.stderr[-2000:]
    assert hazards(done.stdout) == {("CG101", HAZARD_LINE)}
    assert "was interrupted (KeyboardInterrupt)" in done.stderr


@cpu_only
def test_script_that_closes_stdout_and_stderr(tmp_path):
    done = verify_process(tmp_path, script("pass") + "sys.stdout.close()\nsys.stderr.close()\n", "--format", "text")
    assert done.returncode == 1, done.stderr[-2000:]
    assert f"job.py:{HAZARD_LINE}:" in done.stdout and "CG101" in done.stdout
    assert "1 capture(s)" in done.stderr and "Traceback" not in done.stderr


gpu_only = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")

POISON = """
import random
import torch

x = torch.zeros(4, device="cuda")
idx = torch.zeros(1, dtype=torch.long, device="cuda")
side = torch.cuda.Stream()
side.wait_stream(torch.cuda.current_stream())
with torch.cuda.stream(side):
    y = x[idx] + 1  # warm-up
torch.cuda.current_stream().wait_stream(side)
g = torch.cuda.CUDAGraph()
with torch.cuda.graph(g):
    y = x[idx] * random.random()  # expect: CG301 (a hazard that does not fail the capture)
idx.fill_(1 << 40)  # the next replay indexes far out of bounds: a device-side assert
g.replay()
torch.cuda.synchronize()
print("unreachable")
"""


@gpu_only
def test_capture_that_poisons_the_cuda_context_still_gets_its_report(tmp_path):
    done = verify_process(tmp_path, POISON, "--format", "json")
    assert done.returncode == 1, done.stderr[-3000:]
    report = json.loads(done.stdout)  # the report comes out although CUDA is unusable now
    assert hazards(done.stdout) == expected_markers(POISON), report
    assert "the script raised" in done.stderr and "1 capture(s)" in done.stderr
    assert "unreachable" not in done.stdout + done.stderr


# --- the supervisor: the report survives however the script's process ends ------------------

def run_report(done) -> dict:
    return json.loads(done.stdout)


@cpu_only
@pytest.mark.parametrize("exit_code", [0, 3])
def test_os_exit_from_an_except_clause_keeps_the_report(tmp_path, exit_code):
    # The launcher pattern: catch the failure, log it and leave without any cleanup.
    body = f"try:\n        raise RuntimeError('capture failed')\n    except RuntimeError:\n        os._exit({exit_code})"
    done = verify_process(tmp_path, script(body), "--format", "json")
    report = run_report(done)
    assert hazards(done.stdout) == {("CG101", HAZARD_LINE)}
    assert report["run"] == {"exit_status": exit_code, "error": f"os._exit({exit_code}) at job.py:12", "completed": False}
    (capture,) = report["captures"]
    assert (capture["line"], capture["status"], capture["error"]) == (7, "failed", "the run ended during this capture")
    assert done.returncode == 1  # the findings; with none, os._exit(0) alone would be a clean exit
    assert f"the script called os._exit({exit_code}) at job.py:12" in done.stderr


@cpu_only
def test_segmentation_fault_keeps_the_report_and_names_the_line(tmp_path):
    done = verify_process(tmp_path, script("import ctypes; ctypes.string_at(0)"), "--format", "json")
    report = run_report(done)
    assert done.returncode == 1
    assert hazards(done.stdout) == {("CG101", HAZARD_LINE)}
    assert report["run"] == {"exit_status": -11, "error": "SIGSEGV (Segmentation fault) at job.py:9", "completed": False}
    assert report["captures"][0]["status"] == "failed"
    assert "the script crashed (SIGSEGV (Segmentation fault)) at job.py:9" in done.stderr


@cpu_only
def test_timeout_stops_a_hanging_script_and_says_where_it_was(tmp_path):
    done = verify_process(tmp_path, script("import time; time.sleep(600)"), "--format", "json", "--timeout", "45")
    report = run_report(done)
    assert done.returncode == 1
    # the sleep is a timer call in the capture (CG506), seen before the hang (the limit leaves
    # a loaded machine time to import torch)
    assert hazards(done.stdout) == {("CG101", HAZARD_LINE), ("CG506", 9)}
    assert report["run"]["error"] == "timed out after 45 s at job.py:9" and report["run"]["completed"] is False
    assert report["run"]["exit_status"] == -9


@cpu_only
@pytest.mark.parametrize("started_ignoring", [False, True])
def test_ctrl_c_to_cglint_is_passed_on_and_the_report_written(tmp_path, started_ignoring):
    import signal
    import time

    (tmp_path / "job.py").write_text(script("import time; print('waiting', flush=True); time.sleep(600)"))
    cmd = [sys.executable, "-m", "cglint", "verify", "--format", "json", "job.py"]
    # Started with SIGINT ignored (by a parent that ignores it), cglint still takes Ctrl-C and
    # its script process, which inherits that, still stops when cglint passes it on.
    ignore = (lambda: signal.signal(signal.SIGINT, signal.SIG_IGN)) if started_ignoring else None
    proc = subprocess.Popen(cmd, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=ignore)
    waited = ""
    while "waiting" not in waited:  # the script reached its sleep inside the capture
        line = proc.stderr.readline()
        assert line, "the script never started"
        waited += line
    time.sleep(0.5)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err[-2000:]
    report = json.loads(out)
    assert {(f["code"], f["line"]) for f in report["findings"]} == {("CG101", HAZARD_LINE), ("CG506", 9)}
    assert report["run"] == {"exit_status": 130, "error": "KeyboardInterrupt", "completed": False}
    assert report["captures"][0]["status"] == "failed"


@cpu_only
def test_text_report_never_passes_a_run_without_captures(tmp_path):
    done = verify_process(tmp_path, "import torch\nprint(torch.ones(2).sum())\n", "--format", "text")
    assert done.returncode == 0
    assert "All checks passed" not in done.stdout
    assert "the script made no CUDA-graph capture, so no capture was verified" in done.stdout
