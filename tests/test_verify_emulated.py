"""CPU trace mode on scripts written for CUDA: the device is emulated on the CPU, so their
capture paths run and the hazards in them are found at their lines; clean twins stay clean."""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from cglint.rule import expected_markers

torch = pytest.importorskip("torch")
from cglint.verify.cpu_backend import CpuBackend  # noqa: E402 - needs torch
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

SCRIPTS = {
    "training step": (TRAIN_STEP, "LOG", "losses.append(loss.item())  # expect: CG101, CG504", "loss = loss.detach()"),
    "decode loop": (DECODE_LOOP, "SCALE", "scale = temperature * random.uniform(0.9, 1.1)  # expect: CG301", "scale = temperature"),
    "gated module": (GATED_MODULE, "BRANCH", "if h.mean() > 0:  # expect: CG201\n            h = torch.relu(h)",
                     "h = torch.where(h.mean() > 0, torch.relu(h), h)"),
}
# Each script's capture: (kind, status, replays); a call of a graphed callable is a replay.
CAPTURES = {
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
