"""The runtime verifier on a real GPU: trial captures, errors, replays, scripts, the plugin."""
from __future__ import annotations

import inspect
import json
import os
import random
import subprocess
import sys
import textwrap

import pytest

from .helpers import expected_markers

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")

from cglint import verify_function  # noqa: E402

from .samplers import AnnealedSampler  # noqa: E402

HERE = os.path.relpath(__file__)
SAMPLERS = os.path.relpath(inspect.getsourcefile(AnnealedSampler))


def markers_of(fn) -> set[tuple[str, int]]:
    lines, start = inspect.getsourcelines(fn)
    inside = range(start, start + len(lines))
    return {(c, n) for c, n in expected_markers(open(inspect.getsourcefile(fn)).read()) if n in inside}


def found(report, path: str = HERE) -> set[tuple[str, int]]:
    """(code, line) of every finding, all of which must be in `path` (this file unless given)."""
    assert {f.path for f in report.findings} <= {path}, report.summary()
    return {(f.code, f.line) for f in report.findings}


def cuda(*shape):
    return torch.randn(*shape, device="cuda")


def item_step(x):
    y = x * 2
    return y + y.sum().item()  # expect: CG101


def sync_step(x):
    y = x + 1
    torch.cuda.synchronize()  # expect: CG104
    return y


def event_step(x):
    done = torch.cuda.Event()
    done.record()
    done.query()  # expect: CG104
    return x + 1


def host_rng_step(x):
    return x * random.random()  # expect: CG301


def h2d_step(x):
    return x + torch.tensor([1.0, 2.0], device="cuda")  # expect: CG402


def d2h_step(x):
    values = x.cpu()  # expect: CG102
    return values


def cpu_rng_step(x):
    return x + torch.rand(2).cuda()  # expect: CG303, CG402


def good_step(x, w):
    return torch.relu(x @ w).sum(dim=-1)


@pytest.mark.parametrize("fn", [item_step, sync_step, event_step, h2d_step, d2h_step])
def test_capture_error_is_a_finding_at_the_line(fn):
    report = verify_function(fn, (cuda(2),))
    assert report.mode == "gpu"
    assert report.capture_error, report.summary()
    assert found(report) == markers_of(fn), report.summary()
    marked = {f.line: f for f in report.findings}
    (line,) = {n for _, n in markers_of(fn)}
    assert "capture failed here" in marked[line].message


def test_later_captures_work_after_a_failed_one():
    for fn in (item_step, sync_step, d2h_step):
        assert verify_function(fn, (cuda(2),)).capture_error
    report = verify_function(good_step, (cuda(64, 64), cuda(64, 64)), measure_overhead=True)
    assert report.ok and report.capture_error is None, report.summary()
    assert report.divergence == {}
    assert report.pool_bytes and report.pool_bytes > 0
    assert report.eager_ms > 0 and report.replay_ms > 0 and report.bare_capture_ms > 0
    assert not torch.cuda.is_current_stream_capturing()
    torch.cuda.synchronize()


def test_frozen_host_random_number_diverges_on_replay():
    report = verify_function(host_rng_step, (cuda(8),), timing=False)  # timing could add CG990 (info)
    assert report.capture_error is None
    defined = inspect.getsourcelines(host_rng_step)[1]
    assert found(report) == markers_of(host_rng_step) | {("CG690", defined)}, report.summary()
    assert set(report.divergence) == {"output"}


def test_a_divergence_names_the_guarded_values_that_changed():
    report = verify_function(AnnealedSampler(), (cuda(4, 16),), timing=False)
    lines, defined = inspect.getsourcelines(AnnealedSampler.forward)
    # The counter the captured forward steps is also reported where it stops advancing.
    advanced = defined + next(i for i, text in enumerate(lines) if "self.calls += 1" in text)
    expected = markers_of(AnnealedSampler) | {("CG690", defined), ("CG505", advanced)}
    assert found(report, SAMPLERS) == expected, report.summary()
    (divergence,) = (f for f in report.findings if f.code == "CG690")
    read = max(line for _, line in markers_of(AnnealedSampler))
    assert "`self.temperature` (3.0 at capture, " in divergence.message, divergence.message
    assert f"read at {SAMPLERS}:{read})" in divergence.message, divergence.message
    assert (SAMPLERS, read) in {(r.path, r.line) for r in divergence.related}


def test_cpu_rng_moved_to_the_device():
    report = verify_function(cpu_rng_step, (cuda(2),))
    assert found(report) == markers_of(cpu_rng_step), report.summary()


def test_training_step_that_updates_parameters_skips_the_comparison():
    model = torch.nn.Linear(8, 8).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)

    def step(x):
        opt.zero_grad(set_to_none=False)
        loss = model(x).square().mean()
        loss.backward()
        opt.step()
        return loss.detach()

    step(cuda(4, 8))  # gradients exist before capture
    report = verify_function(step, (cuda(4, 8),))
    assert report.capture_error is None and report.ok, report.summary()
    assert any("updates" in s for s in report.skipped)


REBIND = '''
import torch

static_x = torch.zeros(8, device="cuda")
side = torch.cuda.Stream()
side.wait_stream(torch.cuda.current_stream())
with torch.cuda.stream(side):
    static_y = static_x * 2
torch.cuda.current_stream().wait_stream(side)
g = torch.cuda.CUDAGraph()
with torch.cuda.graph(g):
    static_y = static_x * 2
for _ in range(3):
    static_x = torch.randn(8, device="cuda")
    g.replay()  # expect: CG401

scratch = torch.randn(8, device="cuda")
g2 = torch.cuda.CUDAGraph()
with torch.cuda.graph(g2):
    out = scratch * 3
del scratch
g2.replay()  # expect: CG404

g3 = torch.cuda.CUDAGraph()
try:
    with torch.cuda.graph(g3):
        bad = static_y.sum().item()  # expect: CG101
except RuntimeError:
    print("first capture failed as expected")
g4 = torch.cuda.CUDAGraph()
with torch.cuda.graph(g4):
    z = static_y + 1
g4.replay()
torch.cuda.synchronize()
assert torch.equal(z, static_y + 1)
print("later capture ok")

g5 = torch.cuda.CUDAGraph()
side.wait_stream(torch.cuda.current_stream())
with torch.cuda.stream(side):
    g5.capture_begin()
    try:
        w = z * 2
        torch.cuda.synchronize()  # expect: CG104
    finally:
        g5.capture_end()
'''


def run_script(tmp_path, text, *args):
    (tmp_path / "job.py").write_text(textwrap.dedent(text))
    cmd = [sys.executable, "-m", "cglint", "verify", "--format", "json", "job.py", *args]
    return subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True)


def test_script_rebinding_freeing_and_failed_captures(tmp_path):
    out = run_script(tmp_path, REBIND)
    assert out.returncode == 1, out.stderr
    data = json.loads(out.stdout)
    got = {(f["code"], f["line"]) for f in data["findings"]}
    assert got == expected_markers(REBIND), out.stderr
    assert "later capture ok" in out.stderr
    assert "the script raised" in out.stderr  # the last capture's error is the script's crash, reported


POOL_LOOP = '''
import torch


class Runner:
    """A serving engine's capture loop: one graph per batch size, one shared pool."""

    def __init__(self, model, max_bs=8):
        self.model = model
        self.static_x = torch.zeros(max_bs, 64, device="cuda")
        self.pool = torch.cuda.graph_pool_handle()
        self.graphs = {}

    def capture_all(self):
        with torch.no_grad():
            for bs in (8, 4, 2):
                self.model(self.static_x[:bs])  # warm-up on the capture stream's pool
                self.graphs[bs] = torch.cuda.CUDAGraph()
                with torch.cuda.graph(self.graphs[bs], pool=self.pool):
                    self.static_out = self.model(self.static_x[:bs])  # expect: CG958
                    logits = self.static_out.float()  # a temporary of the block

    def run(self, x):
        bs = x.shape[0]
        self.static_x[:bs].copy_(x)
        self.graphs[bs].replay()
        return self.static_out[:bs]


model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.GELU(), torch.nn.Linear(256, 64)).cuda()
runner = Runner(model)
runner.capture_all()
x = torch.randn(4, 64, device="cuda")
print("runner output rows:", runner.run(x).shape[0], "of", x.shape[0])  # graph 2's output, not graph 4's

graphs, outputs = {}, {}
pool = torch.cuda.graph_pool_handle()
static_x = torch.zeros(8, 64, device="cuda")
with torch.no_grad():
    for bs in (8, 4):
        graphs[bs] = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graphs[bs], pool=pool):
            outputs[bs] = model(static_x[:bs])
            static_out = outputs[bs] * 2  # expect: CG958
    static_x[:4].copy_(x)
    graphs[4].replay()  # the last graph: `static_out` is its output
    graphs[8].replay()
    print("kept outputs diff", (outputs[4] - model(x)).abs().max().item())
'''


def test_graphs_captured_in_a_loop_share_one_output_name(tmp_path):
    out = run_script(tmp_path, POOL_LOOP)
    data = json.loads(out.stdout)
    got = {(f["code"], f["line"]) for f in data["findings"]}
    assert got == expected_markers(POOL_LOOP), (data["findings"], out.stderr)


KEPT_STATIC = '''
import torch

class Rollout:
    def __init__(self, net):
        self.net = net
        self.z = torch.zeros(8, 16, device="cuda")
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            net(self.z)
        torch.cuda.current_stream().wait_stream(s)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self.z_next = net(self.z)
        self.outputs = [self.z_next]

    def imagine(self, z0, steps):
        latents, copies = [], []
        self.z.copy_(z0)
        for _ in range(steps):
            self.graph.replay()
            latents.append(self.z_next)  # expect: CG955
            copies.append(self.z_next.clone())
            self.z.copy_(self.z_next)
        return latents, copies

with torch.no_grad():
    Rollout(torch.nn.Linear(16, 16).cuda()).imagine(torch.randn(8, 16, device="cuda"), 4)
'''


def test_static_output_kept_across_replays(tmp_path):
    # The runner's own list of outputs (one each) and the clones are no finding; the list that
    # gets the same static output from every replay is.
    out = run_script(tmp_path, KEPT_STATIC)
    data = json.loads(out.stdout)
    got = {(f["code"], f["line"]) for f in data["findings"]}
    assert got == expected_markers(KEPT_STATIC), (data["findings"], out.stderr)


KEPT_FROM_TUPLE = '''
import torch

class DraftRunner:
    def __init__(self, net):
        self.net = net
        self.token = torch.zeros(4, 16, device="cuda")
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            self.step()
        torch.cuda.current_stream().wait_stream(s)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self.static_outputs = self.step()

    def step(self):
        logits = self.net(self.token)
        return logits.softmax(-1), logits.argmax(-1)

    def __call__(self, token):
        self.token.copy_(token)
        self.graph.replay()
        return self.static_outputs

def draft(runner, token, k):
    probs, kept = [], []
    for _ in range(k):
        prob, next_token = runner(token)
        probs.append(prob)  # expect: CG955
        kept.append(prob.clone())
        token = token + next_token[:, None].float()
    return probs, kept

with torch.no_grad():
    draft(DraftRunner(torch.nn.Linear(16, 16).cuda()), torch.randn(4, 16, device="cuda"), 2)
'''


def test_static_output_in_a_returned_tuple_kept_by_the_caller(tmp_path):
    # EAGLE / gpt-fast speculative drafts: the graph's outputs come back in a tuple, and the
    # draft loop appends one per replay; with k=2 the list holds it once when the second
    # replay overwrites it. The clones are no finding.
    out = run_script(tmp_path, KEPT_FROM_TUPLE)
    data = json.loads(out.stdout)
    got = {(f["code"], f["line"]) for f in data["findings"]}
    assert got == expected_markers(KEPT_FROM_TUPLE), (data["findings"], out.stderr)


GRAPHED = '''
import torch

class Gate(torch.nn.Module):
    def forward(self, x):
        if x.sum() > 0:  # expect: CG201
            return x * 2
        return x

model = Gate().cuda()
torch.cuda.make_graphed_callables(model, (torch.randn(4, device="cuda", requires_grad=True),))
'''


def test_make_graphed_callables_is_instrumented(tmp_path):
    out = run_script(tmp_path, GRAPHED)
    data = json.loads(out.stdout)
    got = {(f["code"], f["line"]) for f in data["findings"]}
    assert got == expected_markers(GRAPHED), out.stderr
    assert {f["region"]["kind"] for f in data["findings"]} == {"make_graphed_callables"}


PLUGIN_TESTS = '''
import torch

def test_unsafe_capture():
    x = torch.ones(3, device="cuda")
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        y = x * 2
        print(y)

def test_safe_capture():
    x = torch.ones(3, device="cuda")
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        y = x * 2
    g.replay()
'''


def test_plugin_fails_the_unsafe_test(tmp_path):
    from importlib.metadata import entry_points

    (tmp_path / "test_user.py").write_text(PLUGIN_TESTS)
    plugin = [] if any(ep.value == "cglint.verify.pytest_plugin" for ep in entry_points(group="pytest11")) else [
        "-p", "cglint.verify.pytest_plugin"]
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *plugin, "--cglint-verify", "test_user.py"]
    out = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True)
    assert "1 failed, 1 passed" in out.stdout, out.stdout + out.stderr
    assert "FAILED test_user.py::test_unsafe_capture" in out.stdout and "CG103" in out.stdout


REGISTERED_GENERATOR = '''
import torch

static_x = torch.ones(1024, device="cuda")
dropout_rng = torch.Generator(device="cuda")
side = torch.cuda.Stream()
side.wait_stream(torch.cuda.current_stream())
with torch.cuda.stream(side):
    static_y = static_x * (torch.rand(1024, device="cuda", generator=dropout_rng) > 0.5)
torch.cuda.current_stream().wait_stream(side)
g = torch.cuda.CUDAGraph()
g.register_generator_state(dropout_rng)
with torch.cuda.graph(g):
    static_y = static_x * (torch.rand(1024, device="cuda", generator=dropout_rng) > 0.5)
masks = set()
for _ in range(4):
    g.replay()
    masks.add(tuple(static_y.tolist()))
assert len(masks) == 4, "the registered generator advances on every replay"
'''


def test_generator_registered_with_the_graph_is_no_finding(tmp_path):
    out = run_script(tmp_path, REGISTERED_GENERATOR)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["findings"] == []


# --- capture API errors raised before anything is captured: failed captures and findings -------

FAILED_BEFORE_CAPTURE = {
    "default stream": '''
import os
import torch

x = torch.ones(8, device="cuda")
y = x * 2
g = torch.cuda.CUDAGraph()
try:
    g.capture_begin()  # expect: CG804
    y = x * 2
    g.capture_end()
except RuntimeError as exc:
    print("capture failed:", exc)
    os._exit(0)
''',
    "autocast cache": '''
import os
import torch

model = torch.nn.Linear(16, 16).cuda()
x = torch.randn(4, 16, device="cuda", requires_grad=True)
with torch.autocast("cuda", dtype=torch.bfloat16):
    try:
        graphed = torch.cuda.make_graphed_callables(model, (x,))  # expect: CG910
    except RuntimeError as exc:
        print("graphing failed:", exc)
        os._exit(0)
''',
    "optimizer not capturable": '''
import os
import torch

model = torch.nn.Linear(16, 16).cuda()
opt = torch.optim.Adam(model.parameters(), lr=1e-3)  # expect: CG905
x = torch.randn(4, 16, device="cuda")
side = torch.cuda.Stream()
side.wait_stream(torch.cuda.current_stream())
with torch.cuda.stream(side):
    for _ in range(3):
        opt.zero_grad(set_to_none=True)
        model(x).sum().backward()
        opt.step()
torch.cuda.current_stream().wait_stream(side)
g = torch.cuda.CUDAGraph()
opt.zero_grad(set_to_none=True)
try:
    with torch.cuda.graph(g):
        model(x).sum().backward()
        opt.step()  # expect: CG905
except RuntimeError as exc:
    print("capture failed:", exc)
    os._exit(0)
''',
}


@pytest.mark.parametrize("name", sorted(FAILED_BEFORE_CAPTURE))
def test_capture_api_errors_are_failed_captures_with_findings(tmp_path, name):
    text = FAILED_BEFORE_CAPTURE[name]
    out = run_script(tmp_path, text)
    assert out.returncode == 1, out.stderr  # the finding; the script itself left with os._exit(0)
    data = json.loads(out.stdout)
    assert {(f["code"], f["line"]) for f in data["findings"]} == expected_markers(text), out.stderr
    assert data["mode"] == "gpu" and data["run"]["completed"] is False
    assert [c["status"] for c in data["captures"]] == ["failed"]
