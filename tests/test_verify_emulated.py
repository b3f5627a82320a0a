"""CPU trace mode on scripts written for CUDA: the device is emulated on the CPU, so their
capture paths run and the hazards in them are found at their lines; clean twins stay clean."""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from .helpers import expected_markers

torch = pytest.importorskip("torch")
from cglint.verify.cpu.backend import CpuBackend  # noqa: E402 - needs torch
pytestmark = pytest.mark.skipif(torch.cuda.is_available(), reason="tests the CPU emulation of CUDA")

TRAIN_STEP = '''
import torch
import torch.nn as nn

device = torch.device("cuda")
model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 1)).cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
static_x = torch.randn(16, 32, device=device)
static_y = torch.randn(16, 1).to("cuda")
losses = []

def step():
    opt.zero_grad(set_to_none=True)
    loss = nn.functional.mse_loss(model(static_x), static_y)
    loss.backward()
    opt.step()
    LOG
    return loss

side = torch.cuda.Stream()
side.wait_stream(torch.cuda.current_stream())
with torch.cuda.stream(side):
    for _ in range(3):
        step()
torch.cuda.current_stream().wait_stream(side)
g = torch.cuda.CUDAGraph()
with torch.cuda.graph(g):
    static_loss = step()
for _ in range(5):
    static_x.copy_(torch.randn(16, 32, device="cuda"))
    g.replay()
'''

DECODE_LOOP = '''
import random
import torch

assert torch.cuda.is_available()
vocab, hidden = 100, 32
with torch.device("cuda"):
    embed = torch.nn.Embedding(vocab, hidden)
    head = torch.nn.Linear(hidden, vocab)
    tokens = torch.zeros(4, dtype=torch.long)
    temperature = torch.full((1,), 0.7)
gen = torch.Generator(device="cuda")
gen.manual_seed(0)

def decode_step():
    logits = head(embed(tokens))
    SCALE
    probs = torch.softmax(logits / scale, dim=-1)
    return torch.multinomial(probs, 1).squeeze(-1)

stream = torch.cuda.Stream()
stream.wait_stream(torch.cuda.current_stream())
with torch.cuda.stream(stream):
    decode_step()
torch.cuda.current_stream().wait_stream(stream)
graph = torch.cuda.CUDAGraph()
graph.capture_begin()
next_tokens = decode_step()
graph.capture_end()
done = torch.cuda.Event()
for _ in range(8):
    graph.replay()
    tokens.copy_(next_tokens)
    done.record()
done.synchronize()
'''

GATED_MODULE = '''
import torch
import torch.nn as nn

class Gate(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(16, 16)

    def forward(self, x):
        h = self.proj(x)
        BRANCH
        return h

model = Gate().to("cuda")
x = torch.randn(8, 16).cuda()
graphed = torch.cuda.make_graphed_callables(model, (x,))
y = graphed(x)
'''

# A policy's exploration noise drawn on the default device: torch.randn without device= draws on
# CUDA there (no CG303), as it would on a GPU; a host random number is still the hazard it is.
DEFAULT_DEVICE = '''
import random
import torch

torch.set_default_device("cuda")
policy = torch.nn.Linear(32, 4)
obs = torch.randn(8, 32)

def act():
    logits = policy(obs)
    NOISE
    return (logits + noise).argmax(-1)

side = torch.cuda.Stream()
side.wait_stream(torch.cuda.current_stream())
with torch.cuda.stream(side):
    act()
torch.cuda.current_stream().wait_stream(side)
g = torch.cuda.CUDAGraph()
with torch.cuda.graph(g):
    action = act()
for _ in range(4):
    obs.copy_(torch.randn(8, 32))
    g.replay()
'''

DEVICE_CONTEXT = '''
import random
import torch

class Sampler(torch.nn.Module):
    def __init__(self, vocab):
        super().__init__()
        self.vocab = vocab

    def forward(self, logits):
        NOISE
        return (logits + gumbel).argmax(-1)

with torch.device("cuda"):
    sampler = Sampler(100)
    logits = torch.randn(4, 100)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        sampler(logits)
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        tokens = sampler(logits)
    g.replay()
'''

SCRIPTS = {
    "default device": (DEFAULT_DEVICE, "NOISE", "noise = torch.full((8, 4), random.gauss(0.0, 0.1))  # expect: CG301",
                       "noise = 0.1 * torch.randn(8, 4)"),
    "device context": (DEVICE_CONTEXT, "NOISE",
                       "gumbel = torch.full((4, self.vocab), random.random()).log().neg()  # expect: CG301",
                       "gumbel = -torch.log(-torch.log(torch.rand(4, self.vocab)))"),
    "training step": (TRAIN_STEP, "LOG", "losses.append(loss.item())  # expect: CG101, CG504", "loss = loss.detach()"),
    "decode loop": (DECODE_LOOP, "SCALE", "scale = temperature * random.uniform(0.9, 1.1)  # expect: CG301", "scale = temperature"),
    "gated module": (GATED_MODULE, "BRANCH", "if h.mean() > 0:  # expect: CG201\n            h = torch.relu(h)",
                     "h = torch.where(h.mean() > 0, torch.relu(h), h)"),
}
# Each script's capture: (kind, status, replays); a call of a graphed callable is a replay.
CAPTURES = {
    "default device": ("torch.cuda.graph", "ok", 4),
    "device context": ("torch.cuda.graph", "ok", 1),
    "training step": ("torch.cuda.graph", "ok", 5),
    "decode loop": ("capture_begin", "ok", 8),
    "gated module": ("make_graphed_callables", "ok", 1),
}


def verify(tmp_path, text):
    (tmp_path / "job.py").write_text(text)
    done = subprocess.run([sys.executable, "-m", "cglint", "verify", "--format", "json", "job.py"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
    return done, json.loads(done.stdout)


def variant(name, hazardous):
    template, slot, bad, good = SCRIPTS[name]
    return textwrap.dedent(template).replace(slot, bad if hazardous else good)


@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_hazard_in_a_cuda_script_is_found_at_its_line(tmp_path, name):
    text = variant(name, hazardous=True)
    done, report = verify(tmp_path, text)
    assert report["mode"] == "cpu" and report["run"] == {"exit_status": 0, "error": None, "completed": True}, done.stderr
    assert {(f["code"], f["line"]) for f in report["findings"]} == expected_markers(text)
    assert [(c["kind"], c["status"], c["replays"]) for c in report["captures"]] == [CAPTURES[name]]
    assert report["notes"] == list(CpuBackend.script_notes)


@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_clean_twin_of_a_cuda_script_has_no_false_alarm(tmp_path, name):
    text = variant(name, hazardous=False)
    done, report = verify(tmp_path, text)
    assert report["run"]["completed"] and report["run"]["error"] is None, done.stderr
    assert {(f["code"], f["line"]) for f in report["findings"]} == expected_markers(text)
    assert [(c["kind"], c["status"], c["replays"]) for c in report["captures"]] == [CAPTURES[name]]


# What the CPU mode's note says it checks on replay: the values the capture read, and the parameters
# it used, on a script that says "cuda" throughout.
REPLAYED_ON_THE_CPU = '''
import torch

class Head(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(16, 16)
        self.temperature = 1.0

    def forward(self, x):
        return torch.softmax(self.proj(x) / self.temperature, dim=-1)  # expect: CG601

head = Head().to(device="cuda")
x = torch.randn(4, 16, device="cuda")
g = torch.cuda.CUDAGraph()
with torch.cuda.graph(g):
    y = head(x)
for t in (1.0, 0.5):
    head.temperature = t
    g.replay()
head.proj.weight = torch.nn.Parameter(torch.zeros(16, 16, device="cuda"))  # expect: CG401
g.replay()
'''


def test_the_cpu_mode_checks_replays_as_its_note_says(tmp_path):
    text = textwrap.dedent(REPLAYED_ON_THE_CPU)
    done, report = verify(tmp_path, text)
    assert report["mode"] == "cpu" and report["run"]["completed"], done.stderr
    assert {(f["code"], f["line"]) for f in report["findings"]} == expected_markers(text)
    (note,) = [n for n in report["notes"] if "CUDA emulated on the CPU" in n]
    assert "each replay() checked the Python values the capture read and the parameters" in note
    assert [c["status"] for c in report["captures"]] == ["ok"] and report["captures"][0]["replays"] == 3


# A loop that reads a graph's outputs after each replay: on a GPU each replay computes them
# from the new inputs, with the Python values as the capture saw them.
READ_AFTER_REPLAY = '''
import json
import torch

static_x = torch.zeros(3, device="cuda")
bias = torch.ones(3, device="cuda")
scale = 2.0
side = torch.cuda.Stream()
side.wait_stream(torch.cuda.current_stream())
with torch.cuda.stream(side):
    static_y = static_x * scale + bias
torch.cuda.current_stream().wait_stream(side)
g = torch.cuda.CUDAGraph()
with torch.cuda.graph(g):
    hidden = static_x * scale
    static_y = hidden + bias
    static_x.add_(0)
seen = []
for i in range(1, 4):
    static_x.copy_(torch.full((3,), float(i), device="cuda"))
    g.replay()
    seen.append(static_y.sum().item())
bias.fill_(0)
g.replay()
seen.append(static_y.sum().item())
with open("seen.json", "w") as out:
    json.dump(seen, out)
'''


def test_replay_computes_the_outputs_a_loop_reads(tmp_path):
    text = textwrap.dedent(READ_AFTER_REPLAY)
    done, report = verify(tmp_path, text)
    assert report["mode"] == "cpu" and report["run"]["completed"] and report["findings"] == [], done.stderr
    # 3 * (2 * i + 1) for i = 1, 2, 3 (replay() computed nothing: the capture's 3.0 each time),
    # then the bias the graph reads, zeroed in place: 3 * 2 * 3.
    assert json.loads((tmp_path / "seen.json").read_text()) == [9.0, 15.0, 21.0, 18.0]
    assert [c["replays"] for c in report["captures"]] == [4]
    (note,) = [n for n in report["notes"] if "CUDA emulated on the CPU" in n]
    assert "ran the capture's operators again" in note and "computing nothing" not in note


def test_a_recorded_operator_that_cannot_run_again_says_why():
    from cglint.verify.cpu.shims import _Recording

    x, bias = torch.zeros(3), torch.ones(3)
    with _Recording() as recording:
        y = x + bias
        empty = torch.empty(3)
    empty.fill_(7)  # no kernel on a GPU: a replay leaves it as it is
    x.add_(1)
    assert recording.replay() is None and y.tolist() == [2.0, 2.0, 2.0] and empty.tolist() == [7.0, 7.0, 7.0]
    x.resize_(5)
    assert recording.replay().startswith("aten.add failed when run again (RuntimeError: The size of tensor a (5)")


# A serving engine's capture loop keeps each graph's output on `self` and reads it back in the
# same block: that tensor is the graph's own work, and the next capture rebinding the attribute
# is no static input rebound. The input the graphs read from `self.inputs` is, when rebound.
OWN_OUTPUT_ON_SELF = '''
import torch

class Runner:
    def __init__(self, model):
        self.model = model
        self.inputs = type("Inputs", (), {})()
        self.inputs.x = torch.zeros(8, 16, device="cuda")
        self.graphs = {}

    def capture_all(self):
        for bs in (8, 4):
            self.graphs[bs] = torch.cuda.CUDAGraph()
            with torch.cuda.graph(self.graphs[bs]):
                self.out = self.model(self.inputs.x[:bs])
                logits = self.out.float()

runner = Runner(torch.nn.Linear(16, 16).to("cuda"))
runner.capture_all()
runner.graphs[8].replay()
runner.inputs.x = torch.ones(8, 16, device="cuda")  # expect: CG401
runner.graphs[8].replay()
'''


def test_an_output_the_capture_stores_on_self_is_not_a_static_input(tmp_path):
    text = textwrap.dedent(OWN_OUTPUT_ON_SELF)
    done, report = verify(tmp_path, text)
    assert report["mode"] == "cpu" and report["run"]["completed"], done.stderr
    assert {(f["code"], f["line"]) for f in report["findings"]} == expected_markers(text)


# A knowledge-distillation loss keeps its temperature on the class, and a callback anneals it
# through the class between replays: no instance __setattr__ runs, so the read is polled.
CLASS_ATTRIBUTE_ANNEALED = '''
import torch

class DistillLoss(torch.nn.Module):
    temperature = 4.0
    alpha = 0.5

    def forward(self, student, teacher):
        t = self.temperature  # expect: CG601
        return self.alpha * torch.nn.functional.mse_loss(student / t, teacher / t)

class Anneal:
    def on_batch_start(self, step):
        DistillLoss.temperature = max(1.0, 4.0 * 0.5 ** step)

loss_fn = DistillLoss()
callbacks = [Anneal()]
student = torch.randn(4, 8, device="cuda")
teacher = torch.randn(4, 8, device="cuda")
g = torch.cuda.CUDAGraph()
with torch.cuda.graph(g):
    loss = loss_fn(student, teacher)
for step in range(3):
    for cb in callbacks:
        cb.on_batch_start(step)
    g.replay()
'''


def test_a_class_attribute_changed_through_the_class_is_seen_before_replay(tmp_path):
    text = textwrap.dedent(CLASS_ATTRIBUTE_ANNEALED)
    done, report = verify(tmp_path, text)
    assert report["mode"] == "cpu" and report["run"]["completed"], done.stderr
    assert {(f["code"], f["line"]) for f in report["findings"]} == expected_markers(text)
