"""Findings in code that runs between replays (rebinding, deleting or keeping what a capture
used, changing the lr it baked in) name the capture they are about, and say what the graph
keeps in words true for the value's kind."""
from __future__ import annotations

import pytest

from cglint.api import check

from .helpers import write_project

RUNNER = """
import torch


class DecodeRunner:
    def __init__(self, model, max_batch):
        self.model = model
        self.temperature = 0.7
        self.graph = torch.cuda.CUDAGraph()
        self.static_tokens = torch.zeros(max_batch, dtype=torch.long, device="cuda")
        self.stream = torch.cuda.Stream()
        with torch.cuda.stream(self.stream):
            self.model(self.static_tokens)
        with torch.cuda.graph(self.graph):
            self.static_logits = self.model(self.static_tokens) / self.temperature

    def set_temperature(self, temperature: float):
        self.temperature = temperature
        self.graph.replay()

    def __call__(self, tokens):
        self.static_tokens = tokens.cuda()
        self.graph.replay()
        return self.static_logits
"""

TRAIN = """
import torch

model = torch.nn.Linear(16, 16).cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.1, capturable=True)
sched = torch.optim.lr_scheduler.StepLR(opt, step_size=100)
static_x = torch.zeros(8, 16, device="cuda")
side = torch.cuda.Stream()
with torch.cuda.stream(side):
    for _ in range(3):
        model(static_x).sum().backward()
        opt.step()
g = torch.cuda.CUDAGraph()
with torch.cuda.graph(g):
    static_loss = model(static_x).sum()
    static_loss.backward()
    opt.step()

losses = []
for batch in range(10):
    static_x = torch.randn(8, 16, device="cuda")
    g.replay()
    losses.append(static_loss)
    sched.step()
del static_x
g.replay()
"""


@pytest.fixture
def project(tmp_path, monkeypatch):
    """Check files as `cglint check .` run in their folder (paths relative to it)."""
    monkeypatch.chdir(tmp_path)

    def run(files: dict[str, str], select):
        write_project(tmp_path, files)
        return check(["."], select=select).findings

    return run


def _by_line(results):
    return {f.line: f for f in results}


def test_a_rebinding_names_the_capture_it_breaks_and_says_what_the_graph_keeps(project):
    found = _by_line(project({"runner.py": RUNNER}, select=("CG401",)))
    assert sorted(found) == [17, 21]
    site = "runner.py:13 with torch.cuda.graph(self.graph)"
    for f in found.values():
        assert (f.region.path, f.region.line, f.region.kind) == ("runner.py", 13, "torch.cuda.graph")
        assert f.trace == (site,)  # the site alone: replay code is not reached from the capture
    # a float read into the kernels, and a tensor whose memory the graph uses
    assert found[17].message == (
        "`self.temperature` is rebound after capture; the graph baked the value it had at capture into its kernels, "
        "so replay ignores the new value"
    )
    assert found[21].message == (
        "`self.static_tokens` is rebound after capture; the graph keeps reading and writing the tensor it had at capture, "
        "so replay ignores the new value"
    )


def test_findings_between_replays_carry_the_capture_they_are_about(project):
    results = project({"train.py": TRAIN}, select=("realloc", "frozen-scalar", "memory"))
    assert {(f.code, f.line) for f in results} == {("CG401", 20), ("CG955", 22), ("CG602", 23), ("CG404", 24)}
    for f in results:
        assert (f.region.path, f.region.line) == ("train.py", 13), f.code
        assert f.trace == ("train.py:13 with torch.cuda.graph(g)",), f.code


def test_deleting_a_number_the_capture_read_frees_nothing(project):
    source = RUNNER + """
    def close(self):
        del self.temperature
        del self.static_tokens
        self.graph.replay()
"""
    found = project({"runner.py": source}, select=("CG404",))
    assert [(f.code, f.line) for f in found] == [("CG404", 27)]


RELOAD = """
import torch

model = torch.nn.Linear(16, 16).cuda()
x = torch.randn(4, 16, device="cuda")
model(x)
g = torch.cuda.CUDAGraph()
with torch.cuda.graph(g):
    y = model(x)
for checkpoint in checkpoints:
    model.weight.data = checkpoint["weight"].cuda()
    model.bias = torch.nn.Parameter(checkpoint["bias"].cuda())
    g.replay()
"""


def test_replacing_a_captured_modules_parameter_names_the_capture(project):
    found = project({"reload.py": RELOAD}, select=("CG401",))
    assert [(f.line, f.trace) for f in found] == [
        (10, ("reload.py:7 with torch.cuda.graph(g)",)),
        (11, ("reload.py:7 with torch.cuda.graph(g)",)),
    ]
