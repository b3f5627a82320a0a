"""The runtime verifier in CPU trace mode (runs in CI, with a CPU build of torch)."""
from __future__ import annotations

import inspect
import json
import logging
import os
import random
import re
import subprocess
import sys
import textwrap
import time

import pytest

from cglint.rule import RUNTIME

from .helpers import expected_markers

torch = pytest.importorskip("torch")

from cglint.verify.findings import errors, frames  # noqa: E402
from cglint.verify.guards import liveness  # noqa: E402
from cglint.verify.run import cli  # noqa: E402
from cglint import verify_function  # noqa: E402
from cglint.verify.capture.instrument import Instrumentation  # noqa: E402
from cglint.verify.findings.recorder import Recorder  # noqa: E402

HERE = os.path.relpath(__file__)
# Scripts and pytest runs use the real torch.cuda on a machine with a GPU (tests/test_verify_gpu.py).
cpu_only = pytest.mark.skipif(torch.cuda.is_available(), reason="tests the CPU trace mode")
HISTORY: list = []
log = logging.getLogger("cglint-test")


def markers_of(*functions) -> set[tuple[str, int]]:
    """(code, line) of the `# expect:` comments inside the given functions."""
    with open(__file__) as file:
        source = file.read()
    found = set()
    for fn in functions:
        lines, start = inspect.getsourcelines(fn)
        inside = range(start, start + len(lines))
        found |= {(code, line) for code, line in expected_markers(source) if line in inside}
    return found


def found(report_or_findings, path=HERE) -> set[tuple[str, int]]:
    """(code, line) of every finding, all of which must be in `path`."""
    findings = getattr(report_or_findings, "findings", report_or_findings)
    assert {f.path for f in findings} <= {path}, [f"{f.path}:{f.line} {f.code}" for f in findings]
    return {(f.code, f.line) for f in findings}


# --- sample functions: every hazard line carries its expected code -------------------------

def syncs(x):
    y = x * 2
    s = y.max().item()  # expect: CG101
    f = float(y[0])  # expect: CG101
    if y.sum() > 0:  # expect: CG201
        y = y + s + f  # expect: CG290
    idx = torch.nonzero(y > 0)  # expect: CG105
    picked = y[y > 1]  # expect: CG106
    u = torch.unique(y)  # expect: CG107
    r = torch.repeat_interleave(y, torch.ones(4, dtype=torch.long))  # expect: CG108
    host = y.cpu()  # expect: CG102
    values = y.tolist()  # expect: CG102
    y.resize_(4)  # expect: CG403
    return y, idx, picked, u, r, host, values


def host_work(x):
    print("step")  # expect: CG501
    print(x)  # expect: CG103
    noise = random.random()  # expect: CG301
    started = time.perf_counter()  # expect: CG506
    HISTORY.append(noise)  # expect: CG504
    log.warning("loss %s", started)  # expect: CG502
    cpu_noise = torch.rand(4)  # expect: CG303
    g = torch.Generator()
    other = torch.rand(4, generator=g)  # expect: CG304
    torch.manual_seed(0)  # expect: CG306
    local = []
    local.append(1)  # a local list dies with the call: not host state
    return x + cpu_noise + other + noise


def clean(x, w):
    h = torch.relu(x @ w)
    if x.dim() == 2 and h.shape[0] > 0:  # host values, not tensor data
        h = h * 2
    mask = (h > 0).to(h.dtype)
    return torch.where(h > 1, h, torch.zeros_like(h)) * mask, h.sum(dim=-1, keepdim=True)


def branchy(x):
    if x[0].item() > 0:  # expect: CG101
        return torch.sin(x)  # expect: CG290
    return torch.cos(x)


# --- the API in CPU mode -------------------------------------------------------------------

def test_syncing_calls_are_reported_at_their_lines():
    # The second input takes the other branch: the first operator that differs is in it.
    report = verify_function(syncs, (torch.tensor([1.0, 2.0, 3.0, 4.0]),), make_inputs=lambda: (-torch.arange(1.0, 5.0),))
    assert report.mode == "cpu"
    assert found(report) == markers_of(syncs)
    assert all(f.source == "runtime" for f in report.findings)


def test_host_work_and_host_rng_are_reported():
    report = verify_function(host_work, (torch.randn(4),))
    assert found(report) == markers_of(host_work)
    printed = next(f for f in report.findings if f.code == "CG103")
    assert printed.category == "sync" and printed.column == 5


def test_clean_function_has_no_findings_and_says_what_needs_a_gpu():
    from cglint.verify.cpu.backend import NOT_CHECKED

    report = verify_function(clean, (torch.randn(3, 4), torch.randn(4, 5)))
    assert report.findings == [] and report.ok
    assert report.skipped == list(NOT_CHECKED) and report.notes == []
    assert report.capture_error is None and report.replay_ms is None


def test_two_inputs_taking_different_paths_are_a_control_flow_finding():
    report = verify_function(branchy, (torch.tensor([1.0, 2.0]),), make_inputs=lambda: (torch.tensor([-1.0, 2.0]),))
    assert found(report) == markers_of(branchy)
    cg290 = next(f for f in report.findings if f.code == "CG290")
    assert "aten.sin" in cg290.message and "aten.cos" in cg290.message


def test_data_dependent_shapes_are_a_dynamic_shape_finding():
    def pick(x):
        return torch.nonzero(x > 0)  # expect: CG105, CG790

    report = verify_function(pick, (torch.tensor([1.0, -1.0, 2.0]),), make_inputs=lambda: (torch.tensor([1.0, 1.0, 2.0]),))
    assert found(report) == markers_of(pick)


def test_make_inputs_must_keep_the_shapes():
    with pytest.raises(ValueError, match="shapes"):
        verify_function(clean, (torch.randn(3, 4), torch.randn(4, 5)), make_inputs=lambda: (torch.randn(2, 4), torch.randn(4, 5)))


def test_finding_carries_region_and_trace_from_the_verify_call():
    def outer(x):
        return inner(x)

    def inner(x):
        return x.sum().item()

    report = verify_function(outer, (torch.randn(3),))
    (finding,) = report.findings
    assert finding.region.kind == "cglint.verify" and finding.region.path == HERE
    # The site is the verify_function() call, also the outermost user frame: it is shown once.
    steps = [step.split(" ", 1)[1] for step in finding.trace]
    assert steps == ["report = verify_function(outer, (torch.randn(3),))", "return inner(x)", "return x.sum().item()"]
    assert finding.to_json()["source"] == "runtime"


def test_the_api_is_a_plain_function_of_cglint():
    import cglint
    from cglint.verify import api

    assert cglint.verify_function is api.verify_function is verify_function
    assert cglint.verify_function(clean, (torch.randn(3, 4), torch.randn(4, 5))).ok


# --- the building blocks -------------------------------------------------------------------

def test_user_frames_skip_torch_and_the_standard_library():
    frames.refresh()
    assert frames.is_user_code(test_user_frames_skip_torch_and_the_standard_library.__code__)
    assert not frames.is_user_code(torch.nn.functional.relu.__code__)
    assert not frames.is_user_code(json.dumps.__code__)


def test_capture_errors_are_translated_and_the_cascade_is_recognised():
    assert errors.meaning(RuntimeError("CUDA error: operation not permitted when stream is capturing"))[0] == "CG190"
    assert errors.meaning(RuntimeError("Cannot copy between CPU and CUDA tensors during CUDA graph capture "
                                       "unless the CPU tensor is pinned."))[0] == "CG402"
    assert errors.meaning(RuntimeError("Offset increment outside graph capture encountered"))[0] == "CG306"
    assert errors.meaning(RuntimeError("CUDA error: capturing stream has unjoined work"))[0] == "CG991"
    cascade = RuntimeError("CUDA error: operation failed due to a previous error during capture")
    assert errors.is_cascade(cascade)


def test_a_capture_error_joins_the_observation_on_its_line():
    from cglint.verify.capture.monitor import record_error

    recorder = Recorder(phase="capture")

    def body(x):
        return x.sum().item() + fail()  # expect: CG101

    def fail():
        raise RuntimeError("CUDA error: operation not permitted when stream is capturing")

    x = torch.randn(2)  # outside: drawn inside, it would be a host-RNG finding (CG303)
    with pytest.raises(RuntimeError) as caught, Instrumentation(recorder, gpu=False):
        body(x)
    record_error(recorder, caught.value)
    codes = {(f.code, f.line) for f in recorder.findings()}
    fail_line = inspect.getsourcelines(fail)[1] + 1
    # raised in fail(): the innermost user line
    assert codes == markers_of(body) | {("CG190", fail_line)}


def test_liveness_reports_rebound_and_freed_tensors():
    import weakref

    recorder = Recorder(phase="replay")
    static_x = torch.zeros(2)
    gone = torch.zeros(2)
    reads = [
        liveness.Read(weakref.ref(static_x), static_x.data_ptr(), ("static_x",), "m.py:1 (aten.mul)"),
        liveness.Read(weakref.ref(gone), gone.data_ptr(), ("gone",), "m.py:2 (aten.add)"),
        liveness.Read(weakref.ref(gone), gone.data_ptr(), (), "m.py:3 (aten.add)"),
    ]
    del gone
    static_x = torch.ones(2)  # rebound instead of copied into
    liveness.check(reads, recorder, sys._getframe(), "m.py:1 (torch.cuda.graph)")
    assert {"CG401", "CG404", "CG490"} == {f.code for f in recorder.findings()}


def test_runtime_rules_are_runtime_only_and_complete():
    from cglint.rule import rules_defined_in
    from cglint.rules import runtime

    rules = rules_defined_in(vars(runtime))
    assert [r.code for r in rules] == ["CG190", "CG290", "CG490", "CG690", "CG790", "CG990", "CG991"]
    for rule in rules:
        assert rule.scope == RUNTIME and not rule.invalid and not rule.valid
        assert rule.summary and rule.message and rule.fix_hint and rule.why
    assert runtime.RuntimeNoGain.severity == "info" and runtime.RuntimeDivergence.severity == "warning"


def test_importing_the_plugin_and_the_package_does_not_import_torch():
    code = ("import sys, cglint, cglint.verify, cglint.verify.pytest_plugin, cglint.verify.run.cli; "
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


# --- cglint verify SCRIPT ------------------------------------------------------------------

SCRIPT = '''
import sys
import torch

device = "cuda" if torch.cuda.is_available() else "cpu"
x = torch.randn(8, device=device)
side = torch.cuda.Stream()
side.wait_stream(torch.cuda.current_stream())
with torch.cuda.stream(side):
    y = x * 2
torch.cuda.current_stream().wait_stream(side)
g = torch.cuda.CUDAGraph()
with torch.cuda.graph(g):
    y = x * 2
    torch.cuda.synchronize()  # expect: CG104
    n = y.sum().item()  # expect: CG101
g.replay()
print("args", sys.argv[1:])
'''


def run_cli(tmp_path, monkeypatch, capsys, text, *argv):
    script = tmp_path / "job.py"
    script.write_text(textwrap.dedent(text))
    monkeypatch.chdir(tmp_path)
    code = cli.main([*argv[:-1], "job.py", *argv[-1]] if argv else ["job.py"])
    out, err = capsys.readouterr()
    return code, out, err


@cpu_only
def test_script_findings_in_json(tmp_path, monkeypatch, capsys):
    code, out, err = run_cli(tmp_path, monkeypatch, capsys, SCRIPT, "--format", "json", ["--", "--steps", "2"])
    assert code == 1
    data = json.loads(out)  # the script's own prints went to stderr
    got = {(f["code"], f["line"]) for f in data["findings"]}
    assert got == expected_markers(SCRIPT)
    assert all(f["source"] == "runtime" and f["region"]["kind"] == "torch.cuda.graph" for f in data["findings"])
    assert "args ['--steps', '2']" in err and "CPU trace mode" in err


def test_script_crash_is_reported_and_not_swallowed(tmp_path, monkeypatch, capsys):
    code, out, err = run_cli(tmp_path, monkeypatch, capsys, "raise KeyError('boom')\n", "--format", "text", [])
    assert code == 1
    assert "KeyError: 'boom'" in err and "raised KeyError" in err


def test_script_exit_status_is_reported(tmp_path, monkeypatch, capsys):
    code, out, err = run_cli(tmp_path, monkeypatch, capsys, "import sys\nsys.exit(3)\n", "--format", "text", [])
    assert code == 1 and "exited with status 3" in err


def test_clean_script_exits_zero(tmp_path, monkeypatch, capsys):
    code, out, err = run_cli(tmp_path, monkeypatch, capsys, "print('hello')\n", "--format", "json", [])
    assert code == 0 and json.loads(out)["findings"] == []


def test_usage_errors_exit_two(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert cli.main([]) == 2
    assert cli.main(["missing.py"]) == 2
    assert cli.main(["--format", "xml", "missing.py"]) == 2
    assert "no such script" in capsys.readouterr().err


def test_help_documents_every_option(capsys):
    assert cli.main(["--help"]) == 0
    out = capsys.readouterr().out
    section = out.split("options:\n")[1].split("\n\n")[0]
    documented = {name for pair in re.findall(r"^  (-[-\w]+)(?:, (-[-\w]+))?", section, re.M) for name in pair if name}
    assert documented == {*cli.HELP_OPTIONS, *cli.OPTIONS_WITH_VALUE} == {"-h", "--help", "--format", "--output-file", "--timeout",
                                                                              "--save-reach", "--reach-root"}
    assert "\narguments:\n  SCRIPT " in out and "\nexit status:\n  0 " in out


@cpu_only
def test_raw_capture_left_open_by_a_crash_is_closed(tmp_path, monkeypatch, capsys):
    text = '''
    import torch
    g = torch.cuda.CUDAGraph()
    g.capture_begin()
    x = torch.ones(2)
    print(x)  # expect: CG103
    raise ValueError("broken step")
    '''
    code, out, err = run_cli(tmp_path, monkeypatch, capsys, text, "--format", "json", [])
    assert code == 1 and "ValueError: broken step" in err
    assert {(f["code"], f["line"]) for f in json.loads(out)["findings"]} == expected_markers(textwrap.dedent(text))
    assert torch.cuda.graph is not None and not hasattr(torch.cuda.graph, "_inst")  # shims removed


# --- pytest plugin -------------------------------------------------------------------------

PLUGIN_TESTS = '''
import pytest
import torch

def test_unsafe_capture():
    x = torch.ones(3)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        y = x * 2
        flag = bool(y.sum() > 1)

def test_safe_capture():
    x = torch.ones(3)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        y = x * 2

def test_fixture(cglint_verify):
    def step(x):
        return x.sum().item()
    cglint_verify(step, (torch.ones(2),))

def test_fixture_report(cglint_verify):
    report = cglint_verify(lambda x: x * 2, (torch.ones(2),))
    assert report.ok
'''


def _plugin_args() -> list[str]:
    from importlib.metadata import entry_points

    installed = any(ep.value == "cglint.verify.pytest_plugin" for ep in entry_points(group="pytest11"))
    return [] if installed else ["-p", "cglint.verify.pytest_plugin"]


def _pytest(tmp_path, *args):
    (tmp_path / "test_user.py").write_text(PLUGIN_TESTS)
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *_plugin_args(), *args, "test_user.py"]
    return subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True)


@cpu_only
def test_plugin_fails_unsafe_captures_with_the_option(tmp_path):
    out = _pytest(tmp_path, "--cglint-verify")
    assert "2 failed, 2 passed" in out.stdout, out.stdout + out.stderr
    assert "FAILED test_user.py::test_unsafe_capture" in out.stdout
    assert "FAILED test_user.py::test_fixture" in out.stdout
    assert "test_user.py:10" in out.stdout and "CG101" in out.stdout


@cpu_only
def test_plugin_is_inert_without_the_option(tmp_path):
    out = _pytest(tmp_path)
    # without the option only the explicit fixture verifies; the captures fail on their own (no CUDA)
    failed = {line.split(" ")[1] for line in out.stdout.splitlines() if line.startswith("FAILED ")}
    assert failed == {"test_user.py::test_unsafe_capture", "test_user.py::test_safe_capture",
                      "test_user.py::test_fixture"}, out.stdout
    assert "3 failed, 1 passed" in out.stdout
    assert "cglint: CUDA-graph capture is not safe" not in out.stdout
    assert "cglint verify (cpu mode): 1 finding(s)" in out.stdout  # the fixture's report


DYING_TESTS = '''
import ctypes, os
import torch

def test_dies_by_os_exit():
    x = torch.ones(3)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        n = x.sum().item()
        os._exit(0)

def test_crashes():
    x = torch.ones(3)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        flag = bool(x.sum() > 1)
        ctypes.string_at(0)
'''


@cpu_only
@pytest.mark.parametrize("test, finding", [("test_dies_by_os_exit", ("CG101", 9)), ("test_crashes", ("CG101", 16))])
def test_plugin_keeps_the_findings_of_a_test_whose_process_dies(tmp_path, test, finding):
    (tmp_path / "test_dying.py").write_text(DYING_TESTS)
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *_plugin_args(), "--cglint-verify",
           "--cglint-verify-log", "verify.jsonl", f"test_dying.py::{test}"]
    out = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True)
    assert out.returncode != 0 or test == "test_dies_by_os_exit", out.stdout + out.stderr
    from cglint.verify.run import events

    logged = events.read(str(tmp_path / "verify.jsonl"))["test"]
    assert logged["test"] == f"test_dying.py::{test}"
    assert {(f["code"], f["line"]) for f in logged["findings"]} == {finding}
    assert logged["captures"][0]["status"] == "failed"
    if test == "test_dies_by_os_exit":  # told on the terminal too
        assert f"cglint: test_dying.py::{test} called os._exit(0); its findings:" in out.stderr
        assert f"test_dying.py:{finding[1]}:" in out.stderr


def test_numpy_random_is_host_rng():
    np = pytest.importorskip("numpy")

    def noisy(x):
        return x * float(np.random.rand())  # expect: CG302

    report = verify_function(noisy, (torch.randn(3),))
    assert found(report) == markers_of(noisy)
    assert "hook" not in np.random.rand.__qualname__  # the wrapper is gone after the run


def test_evidence_lists_every_phase_once():
    report = verify_function(lambda x: x.sum().item(), (torch.randn(3),))
    (finding,) = report.findings
    assert finding.message.count("seen during") == 1 and "second input" in finding.message


# --- generators registered with the graph (register_generator_state) ---------------------------

GENERATORS = '''
import torch

device = "cuda" if torch.cuda.is_available() else "cpu"
static_x = torch.ones(4, device=device)
dropout_rng = torch.Generator(device=device)
stray_rng = torch.Generator(device=device)
g = torch.cuda.CUDAGraph()
g.register_generator_state(dropout_rng)
with torch.cuda.graph(g):
    keep = torch.rand(4, device=device, generator=dropout_rng) > 0.1
    static_y = static_x * keep
    jitter = torch.rand(4, device=device, generator=stray_rng)  # expect: CG304
g.replay()
'''


@cpu_only
def test_a_generator_registered_with_the_graph_is_not_a_finding(tmp_path, monkeypatch, capsys):
    code, out, err = run_cli(tmp_path, monkeypatch, capsys, GENERATORS, "--format", "json", [])
    assert code == 1, err
    assert {(f["code"], f["line"]) for f in json.loads(out)["findings"]} == expected_markers(GENERATORS)


def test_only_the_capturing_graphs_generators_are_exempt():
    from cglint.verify.capture.classify import classify_call

    owned, stray = torch.Generator(), torch.Generator()
    draw = {"device": "cpu", "generator": owned}
    assert classify_call("rand", (4,), draw, gpu=True, frame=None, owned_generators=(owned,)) is None
    assert classify_call("rand", (4,), draw, gpu=True, frame=None, owned_generators=(stray,))[0] == "CG304"
    assert classify_call("rand", (4,), draw, gpu=True, frame=None)[0] == "CG304"


def test_the_design_name_of_the_api_calls_verify_function():
    # shared/DESIGN.md names the API `cglint.verify(fn, sample_args, ...)`; once a module of the
    # verifier is imported, `cglint.verify` is the package, which must still answer the call.
    import cglint
    import cglint.verify.api  # binds cglint.verify to the package

    report = cglint.verify(lambda x: x * 2, (torch.zeros(3),))
    assert type(report).__name__ == "VerifyReport" and report.mode == "cpu" and not report.findings
