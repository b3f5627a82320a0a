"""Replay guards: Python values a capture read and the program changes before a replay.

The scripts pick their device at run time, so they run in CPU trace mode here (the stand-in
graph's replay() checks the guards as the GPU patches do) and on a real capture where there
is a GPU. Each marked line is reported with its code and nothing else is; the changing line
is the finding's related location where the verifier can see it.
"""
from __future__ import annotations

import inspect
import json
import textwrap

import pytest

from .helpers import expected_markers

torch = pytest.importorskip("torch")

from cglint.verify.guards import readplan  # noqa: E402
from cglint.verify.run import cli  # noqa: E402

from .samplers import AnnealedSampler  # noqa: E402

DEVICE = 'DEVICE = "cuda" if torch.cuda.is_available() else "cpu"\n'


def run(tmp_path, monkeypatch, capsys, script: str, **modules: str) -> list[dict]:
    for name, text in modules.items():
        (tmp_path / f"{name}.py").write_text(textwrap.dedent(text))
    (tmp_path / "job.py").write_text(textwrap.dedent(script))
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    cli.main(["--format", "json", "job.py"])
    out, _ = capsys.readouterr()
    return json.loads(out)["findings"]


def located(findings: list[dict]) -> set[tuple[str, str, int]]:
    return {(f["path"], f["code"], f["line"]) for f in findings}


def expected(script: str, **modules: str) -> set[tuple[str, str, int]]:
    files = {"job.py": script, **{f"{n}.py": t for n, t in modules.items()}}
    return {(path, code, line) for path, text in files.items() for code, line in expected_markers(textwrap.dedent(text))}


def line_of(script: str, text: str) -> int:
    return next(n for n, line in enumerate(textwrap.dedent(script).splitlines(), 1) if text in line)


def related_lines(findings: list[dict], code: str) -> list[tuple[str, int]]:
    return [(r["path"], r["line"]) for f in findings if f["code"] == code for r in f.get("related", ())]


SAMPLER = """
import torch

""" + DEVICE + """

class Sampler:
    def __init__(self, temperature):
        self.temperature = temperature
        self.top_k = 4

    def set_temperature(self, temperature):
        self.temperature = temperature

    def __call__(self, logits):
        top = logits.topk(self.top_k).values
        return torch.softmax(top / self.temperature, dim=-1)  # expect: CG601


sampler = Sampler(0.8)
logits = torch.randn(2, 16, device=DEVICE)
sampler(logits)  # warmup: the first call initialises the libraries outside the capture
g = torch.cuda.CUDAGraph()
with torch.cuda.graph(g):
    probs = sampler(logits)
for t in (0.8, 0.5, 1.2):
    sampler.set_temperature(t)
    g.replay()
"""


def test_a_temperature_a_method_changes_between_replays(tmp_path, monkeypatch, capsys):
    findings = run(tmp_path, monkeypatch, capsys, SAMPLER)
    assert located(findings) == expected(SAMPLER)
    (finding,) = findings
    assert "`self.temperature` was 0.8 at capture and is 0.5 before this replay" in finding["message"]
    assert finding["trace"][-1].startswith(f"job.py:{finding['line']} return torch.softmax")


EVAL_AFTER_CAPTURE = """
import torch
import torch.nn as nn

""" + DEVICE + """

class Block(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.fc = nn.Linear(d, d)
        self.drop = nn.Dropout(0.1)

    def forward(self, x):
        h = torch.relu(self.fc(x))
        if self.training:  # expect: CG202
            h = self.drop(h)  # expect: CG202
        return h


net = nn.Sequential(Block(32), Block(32)).to(DEVICE)
x = torch.randn(8, 32, device=DEVICE)
net(x)  # warmup: the first call initialises the libraries outside the capture
g = torch.cuda.CUDAGraph()
with torch.cuda.graph(g):
    y = net(x)
net.eval()
for _ in range(3):
    g.replay()
"""


def test_eval_after_capture_with_a_branch_on_training_and_a_dropout(tmp_path, monkeypatch, capsys):
    findings = run(tmp_path, monkeypatch, capsys, EVAL_AFTER_CAPTURE)
    assert located(findings) == expected(EVAL_AFTER_CAPTURE)
    assert set(related_lines(findings, "CG202")) == {("job.py", line_of(EVAL_AFTER_CAPTURE, "net.eval()"))}
    messages = " ".join(f["message"] for f in findings)
    assert "`self.training` was True at capture and is False" in messages and "`Dropout.training`" in messages


GLOBAL_IN_ANOTHER_MODULE = {
    "settings": """
        GUIDANCE = 7.5


        def set_guidance(value):
            global GUIDANCE
            GUIDANCE = value
    """,
}
GUIDED = """
import torch

import settings

""" + DEVICE + """

def cfg_step(uncond, cond):
    return uncond + settings.GUIDANCE * (cond - uncond)  # expect: CG601


uncond, cond = torch.zeros(4, device=DEVICE), torch.ones(4, device=DEVICE)
cfg_step(uncond, cond)  # warmup: the first call initialises the libraries outside the capture
g = torch.cuda.CUDAGraph()
with torch.cuda.graph(g):
    out = cfg_step(uncond, cond)
for scale in (7.5, 3.0):
    settings.set_guidance(scale)
    g.replay()
"""


def test_a_global_set_through_global_in_another_module(tmp_path, monkeypatch, capsys):
    findings = run(tmp_path, monkeypatch, capsys, GUIDED, **GLOBAL_IN_ANOTHER_MODULE)
    assert located(findings) == expected(GUIDED)
    assert related_lines(findings, "CG601") == [("settings.py", line_of(GLOBAL_IN_ANOTHER_MODULE["settings"], "= value"))]


CONFIG_AND_CONTAINERS = """
import dataclasses

import torch
import torch.nn as nn

""" + DEVICE + """
STEPS = 3


@dataclasses.dataclass
class Config:
    scale: float = 0.5
    window: int = 4


class Mixer(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.opts = {"alpha": 0.1, "name": "mix"}
        self.history = [0.0]

    def forward(self, x, buf):
        y = x * self.cfg.scale + self.opts["alpha"]  # expect: CG601
        y = y + buf[: self.cfg.window].sum()  # expect: CG702
        for _ in range(len(self.history)):  # expect: CG202
            y = y * 0.5
        return y


def make_step(model):
    gain = 2.0

    def step(x, buf):
        return model(x, buf) * gain  # expect: CG601

    def retune(value):
        nonlocal gain
        gain = value

    return step, retune


cfg = Config()
model = Mixer(cfg).to(DEVICE)
x, buf = torch.randn(4, device=DEVICE), torch.randn(16, device=DEVICE)
step, retune = make_step(model)
step(x, buf)  # warmup: the first call initialises the libraries outside the capture
g = torch.cuda.CUDAGraph()
with torch.cuda.graph(g):
    out = step(x, buf)
cfg.scale = 0.25
model.opts["alpha"] = 0.3
cfg.window += 1
model.history.append(1.0)
retune(4.0)
g.replay()
"""


def test_config_fields_dict_entries_list_lengths_and_closure_cells(tmp_path, monkeypatch, capsys):
    findings = run(tmp_path, monkeypatch, capsys, CONFIG_AND_CONTAINERS)
    assert located(findings) == expected(CONFIG_AND_CONTAINERS)
    messages = " ".join(f["message"] for f in findings)
    for read in ("`self.cfg.scale` was 0.5", "`self.opts['alpha']` was 0.1", "`self.cfg.window` was 4",
                 "`len(self.history)` was 1", "`gain` was 2.0"):
        assert read in messages


REBINDING = """
import torch
import torch.nn as nn

""" + DEVICE + """

class Norm(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.lin = nn.Linear(d, d)
        self.register_buffer("scale", torch.ones(d))

    def forward(self, x):
        return self.lin(x) * self.scale


def reload(model, state):
    model.lin.weight.data = state["weight"].clone()  # expect: CG401


model = Norm(8).to(DEVICE)
x = torch.randn(2, 8, device=DEVICE)
model(x)  # warmup: the first call initialises the libraries outside the capture
g = torch.cuda.CUDAGraph()
with torch.cuda.graph(g):
    y = model(x)
reload(model, {"weight": torch.randn(8, 8, device=DEVICE)})
g.replay()
model.lin.bias = nn.Parameter(torch.zeros(8, device=DEVICE))  # expect: CG401
model.scale = torch.full((8,), 2.0, device=DEVICE)  # expect: CG401
g.replay()
"""


def test_parameters_and_buffers_rebound_after_capture_at_the_rebinding_line(tmp_path, monkeypatch, capsys):
    findings = run(tmp_path, monkeypatch, capsys, REBINDING)
    assert located(findings) == expected(REBINDING)
    by_line = {f["line"]: f["message"] for f in findings}
    assert "`.data` assignment moves `weight` of Linear" in by_line[line_of(REBINDING, ".data =")]
    assert "`bias` of Linear is rebound" in by_line[line_of(REBINDING, "model.lin.bias =")]
    assert "`scale` of Norm is rebound" in by_line[line_of(REBINDING, "model.scale =")]


CACHE_REBOUND_IN_FORWARD = """
import torch
import torch.nn as nn

""" + DEVICE + """

class Accumulator(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("total", torch.zeros(4))

    def forward(self, x):
        self.total = self.total + x  # expect: CG401
        return self.total


acc = Accumulator().to(DEVICE)
x = torch.ones(4, device=DEVICE)
acc(x)  # warmup: the first call initialises the libraries outside the capture
g = torch.cuda.CUDAGraph()
with torch.cuda.graph(g):
    out = acc(x)
g.replay()
"""


def test_a_buffer_rebound_inside_the_captured_forward(tmp_path, monkeypatch, capsys):
    findings = run(tmp_path, monkeypatch, capsys, CACHE_REBOUND_IN_FORWARD)
    assert located(findings) == expected(CACHE_REBOUND_IN_FORWARD)


GRAPHED_CALLABLE = """
import torch

""" + DEVICE + """

class Scaler:
    def __init__(self):
        self.gain = 1.0

    def __call__(self, x):
        return x * self.gain  # expect: CG601


scaler = Scaler()
x = torch.randn(4, device=DEVICE, requires_grad=True)
graphed = torch.cuda.make_graphed_callables(scaler, (x,))
graphed(x)
scaler.gain = 3.0
graphed(x)
"""


def test_a_graphed_callable_checks_its_guards_on_every_call(tmp_path, monkeypatch, capsys):
    findings = run(tmp_path, monkeypatch, capsys, GRAPHED_CALLABLE)
    assert located(findings) == expected(GRAPHED_CALLABLE)


CLEAN = """
import torch
import torch.nn as nn

""" + DEVICE + """
LIMIT = 4


class Decoder(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.proj = nn.Linear(d, d)
        self.drop = nn.Dropout(0.1)
        self.temperature = torch.ones((), device=DEVICE)
        self.steps = 2
        self.calls = 0
        self.mode = "sample"

    def forward(self, x):
        for _ in range(self.steps):
            x = self.drop(torch.tanh(self.proj(x)))
        if self.mode == "greedy":
            x = x * 0.0 + self.temperature * LIMIT
        return x / self.temperature


model = Decoder(16).to(DEVICE)
model.steps = 3  # changed before the capture: the graph has the value the code now holds
model.eval()
x = torch.randn(2, 16, device=DEVICE)
model(x)  # warmup: the first call initialises the libraries outside the capture
g = torch.cuda.CUDAGraph()
with torch.cuda.graph(g):
    out = model(x)
for t in (0.5, 1.0, 2.0):
    model.temperature.fill_(t)  # a device tensor refilled in place
    model.calls += 1  # host bookkeeping the capture never read
    model.proj.weight.data.mul_(0.5)  # written in place: the same memory
    with torch.no_grad():
        model.proj.bias.copy_(torch.zeros(16, device=DEVICE))
    g.replay()
"""


def test_clean_counterparts_are_silent(tmp_path, monkeypatch, capsys):
    findings = run(tmp_path, monkeypatch, capsys, CLEAN)
    assert findings == []


def test_a_value_changed_after_the_last_replay_is_not_a_finding(tmp_path, monkeypatch, capsys):
    script = SAMPLER.replace("for t in (0.8, 0.5, 1.2):\n    sampler.set_temperature(t)\n    g.replay()",
                             "g.replay()\nsampler.set_temperature(2.0)")
    assert run(tmp_path, monkeypatch, capsys, script) == []


def test_values_only_read_in_a_branch_not_taken_are_not_guarded(tmp_path, monkeypatch, capsys):
    script = """
    import torch

    """ + DEVICE + """

    class Head:
        def __init__(self):
            self.greedy = False
            self.alpha, self.beta = 1.0, 2.0

        def __call__(self, x):
            if self.greedy:  # expect: CG202
                return x * self.alpha
            return x * self.beta


    head = Head()
    x = torch.randn(4, device=DEVICE)
    head(x)  # warmup: the first call initialises the libraries outside the capture
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        y = head(x)
    head.alpha = 5.0
    g.replay()
    head.greedy = True
    g.replay()
    """
    findings = run(tmp_path, monkeypatch, capsys, script)
    assert located(findings) == expected(script)


def capture_loop(sizes: str) -> str:
    """A script's top level capturing one graph per batch size into one pool, as serving scripts
    do; each graph reads the global `scale`."""
    return """
    import torch

    """ + DEVICE + """
    scale = 1.0
    static_x = torch.zeros(8, 16, device=DEVICE)
    pool = torch.cuda.graph_pool_handle() if torch.cuda.is_available() else None
    graphs, outputs = {}, {}
    for bs in """ + sizes + """:
        graphs[bs] = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graphs[bs], pool=pool):
            outputs[bs] = static_x[:bs] * scale  # expect: CG601"""


def test_a_capture_loop_variable_keys_its_graphs_and_is_not_a_guard(tmp_path, monkeypatch, capsys):
    # A script captures one graph per batch size at top level and replays them by size after
    # the loop: `bs` (read by the `with` line and by the slice) was each graph's own value, not
    # a value frozen and changed since. The scale the replay loop sets is a real hazard.
    script = capture_loop("(8, 4, 2)") + """
    for step, size in enumerate((2, 8, 4)):
        scale = 1.0 + step
        graphs[size].replay()
    """
    findings = run(tmp_path, monkeypatch, capsys, script)
    assert located(findings) == expected(script)


def _uses(fn) -> dict[str, str]:
    return {site.text: site.use for site in readplan.plan(fn.__code__)}


def test_the_bytecode_names_each_assignment_and_the_loops_around_a_point():
    # Replays find a capture's outputs by the assignment that bound them (`self.static_out`
    # in a runner, a local in a script), and the capture loop's variable is no replay guard.
    from cglint.verify.guards import bytecode

    def capture_all(self, graphs, sizes):
        for bs in sizes:
            for i, (name, graph) in enumerate(graphs):  # noqa: B007 - the stores are what is tested
                self.static_out = graph(bs)
                logits = self.static_out.float()
        return logits

    code = capture_all.__code__
    stored = {target for target, _line, _offset in bytecode.stores(code)}
    assert {"self.static_out", "logits", "bs", "i", "name", "graph"} <= stored
    inside = next(offset for target, _line, offset in bytecode.stores(code) if target == "logits")
    assert readplan.loop_targets(code, inside) == {"bs", "i", "name", "graph"}
    assert readplan.loop_targets(code, 0) == frozenset()


def test_the_bytecode_says_what_consumes_each_read():
    def forward(self, x, kv):
        for _ in range(self.num_steps):
            x = x * self.cfg["a"]
        if self.step % self.every == 0 and len(self.buf) > 3:
            x = x + 1
        self.cache[self.pos : self.pos + kv.shape[0]].copy_(kv)
        y = x * (2 if self.flag else 1) * self.gain
        return y / LIMIT  # noqa: F821

    assert _uses(forward) == {
        "range": "branch", "self.num_steps": "branch", "self.cfg['a']": "value", "self.step": "branch",
        "self.every": "branch", "len": "branch", "len(self.buf)": "branch", "self.cache": "value",
        "self.pos": "slice", "kv.shape[0]": "slice", "self.flag": "branch", "self.gain": "value", "LIMIT": "value",
    }


class FrozenReplay:
    """A stand-in for the CUDA graph of AnnealedSampler: each replay computes what was captured,
    the softmax at the temperature of the capture."""

    def __init__(self, static_x, static_out, temperature):
        self.static_x, self.static_out, self.temperature = static_x, static_out, temperature

    def replay(self):
        self.static_out.copy_(torch.softmax(self.static_x / self.temperature, dim=-1))


def test_a_divergence_names_the_guarded_value_that_explains_it():
    """The API's replay-against-eager comparison: the CG690 finding says which value the capture
    froze changed, with both values and the line that read it (a related location)."""
    from cglint.findings import Region
    from cglint.verify import gpu_backend
    from cglint.verify.findings import frames
    from cglint.verify.capture.instrument import Instrumentation
    from cglint.verify.findings.recorder import Recorder
    from cglint.verify.result import VerifyReport

    sampler = AnnealedSampler()
    static = (torch.randn(4, 16),)
    recorder = Recorder(Region("tests/test_replay_guards.py", 1, "cglint.verify_function"), stop=None)
    inst = Instrumentation(Recorder(recorder.region, phase="capture"), gpu=False, guard_reads=True)
    with inst:
        static_out = sampler(*static)
    graph = FrozenReplay(static[0], static_out, sampler.temperature)
    report = VerifyReport(mode="gpu")
    gpu_backend._replay_against_eager(sampler, static, None, graph, static, static_out, recorder, report,
                                      replays=3, rtol=1e-4, atol=1e-5, guarded=inst.guards)

    lines, start = inspect.getsourcelines(AnnealedSampler.forward)
    calls_line, read_line = (start + next(i for i, text in enumerate(lines) if marker in text)
                             for marker in ("0.5 * self.calls", "logits / self.temperature"))
    here = frames.display_path(inspect.getsourcefile(AnnealedSampler))
    findings = recorder.findings()
    assert {(f.code, f.line) for f in findings} == {("CG601", calls_line), ("CG601", read_line),
                                                    ("CG690", start)}
    (divergence,) = (f for f in findings if f.code == "CG690")
    assert ("explained by what the capture froze: "
            f"`self.calls` (1 at capture, 3 now; read at {here}:{calls_line}), "
            f"`self.temperature` (1.5 at capture, 2.5 now; read at {here}:{read_line})") in divergence.message
    assert [(r.path, r.line, r.message) for r in divergence.related] == [
        (here, calls_line, "`self.calls` is read here: 1 at capture, 3 now"),
        (here, read_line, "`self.temperature` is read here: 1.5 at capture, 2.5 now")]


def test_a_divergence_with_no_changed_guard_points_at_the_suspects():
    """Without a changed guard the finding keeps pointing at the hazards the capture recorded."""
    from cglint.findings import Region
    from cglint.verify import gpu_backend
    from cglint.verify.findings.recorder import Recorder
    from cglint.verify.result import VerifyReport

    sampler = AnnealedSampler()
    static = (torch.randn(4, 16),)
    static_out = sampler(*static)
    graph = FrozenReplay(static[0], static_out, 1.0)  # replays something else: no guard explains it
    recorder = Recorder(Region("tests/test_replay_guards.py", 1, "cglint.verify_function"), stop=None)
    gpu_backend._replay_against_eager(sampler, static, None, graph, static, static_out, recorder,
                                      VerifyReport(mode="gpu"), replays=2, rtol=1e-4, atol=1e-5, guarded=None)
    (divergence,) = recorder.findings()
    assert divergence.code == "CG690" and "explained by" not in divergence.message and not divergence.related


def test_graphs_captured_at_one_site_each_report_their_own_replay(tmp_path, monkeypatch, capsys):
    # Captures at one site share the guards they build (collector._built); each graph still checks
    # them for itself: the second graph's replay after the change is evidence of its own.
    script = capture_loop("(8, 4)") + """
    scale = 2.0
    graphs[8].replay()
    graphs[4].replay()
    """
    findings = run(tmp_path, monkeypatch, capsys, script)
    assert located(findings) == expected(script)
    (finding,) = findings
    for replay in ("graphs[8].replay()", "graphs[4].replay()"):
        assert f"seen before the replay at job.py:{line_of(script, replay)}" in finding["message"]
