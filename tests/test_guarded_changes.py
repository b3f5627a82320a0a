"""CG603 says which write changes the value between calls of a compiled function, and is
reported only where such a write is seen running between calls. Each case is checked
statically and, with torch, run under `torch.compile(backend="eager")`, counting the frames
Dynamo compiles: a reported value recompiles, an unreported one does not."""
from __future__ import annotations

import textwrap

import pytest

from cglint.api import check_source

BATCH = """
import torch


class Batch:
    def __init__(self, x):
        self.x = x
        self.batch_size = x.shape[0]

    def resize(self, n):
        self.batch_size = n

    def scaled(self):
        return self.x * self.batch_size


"""

# name: (program, {text of the line CG603 reports: [texts of its related lines]}).
CASES = {
    # A setter called in the loop that calls the compiled function: recompiles.
    "setter-called-in-loop": ("""
import torch


class Scaler:
    def __init__(self):
        self.scale = 1.0

    def set_scale(self, scale):
        self.scale = scale


scaler = Scaler()


@COMPILE
def step(x):
    return x * scaler.scale


for i in range(4):
    scaler.set_scale(0.5 * i)
    step(torch.ones(3))
""", {"return x * scaler.scale": ["scaler.set_scale(0.5 * i)", "self.scale = scale"]}),
    # The object is built inside the compiled function; `resize()` of another object in the loop.
    "object-built-in-the-call": (BATCH + """
@COMPILE
def step(x):
    batch = Batch(x)
    return batch.x * batch.batch_size


for i in range(4):
    Batch(torch.ones(2)).resize(i)
    step(torch.ones(3))
""", {}),
    # `self.batch_size` of an object the compiled function constructs and calls a method of.
    "method-of-an-object-built-in-the-call": (BATCH + """
@COMPILE
def step(x):
    return Batch(x).scaled()


for i in range(4):
    Batch(torch.ones(2)).resize(i)
    step(torch.ones(3))
""", {}),
    # A long-lived object whose `resize()` nothing calls.
    "writer-nothing-calls": (BATCH + """
batch = Batch(torch.ones(3))


@COMPILE
def step(x):
    return x * batch.scaled()


for i in range(4):
    step(torch.ones(3))
""", {}),
    # The same object resized in the loop: recompiles.
    "writer-called-in-loop": (BATCH + """
batch = Batch(torch.ones(3))


@COMPILE
def step(x):
    return x * batch.scaled()


for i in range(4):
    batch.resize(i + 1)
    step(torch.ones(3))
""", {"return self.x * self.batch_size": ["batch.resize(i + 1)", "self.batch_size = n"]}),
}


def static(program: str):
    source = program.replace("@COMPILE", '@torch.compile(mode="reduce-overhead")')
    return [f for f in check_source(textwrap.dedent(source), "example.py") if f.code == "CG603"]


@pytest.mark.parametrize("name", sorted(CASES))
def test_cg603_names_the_write_that_runs_between_calls(name):
    program, expected = CASES[name]
    found = static(program)
    lines = textwrap.dedent(program).splitlines()

    def line(text: str) -> int:
        return next(n for n, code in enumerate(lines, 1) if code.strip() == text)

    assert {f.line: [r.line for r in f.related] for f in found} == {
        line(read): [line(r) for r in related] for read, related in expected.items()
    }
    for finding in found:
        assert "changed between calls by" in finding.message
        assert all(r.path == "example.py" and r.message for r in finding.related)


def frames_compiled(program: str) -> int:
    torch = pytest.importorskip("torch")
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    exec(compile(program.replace("@COMPILE", '@torch.compile(backend="eager")'), "example.py", "exec"), {"__name__": "example"})
    return counters["frames"]["total"]


@pytest.mark.parametrize("name", sorted(CASES))
def test_torch_recompiles_exactly_where_cg603_reports(name):
    program, expected = CASES[name]
    frames = frames_compiled(program)
    if expected:
        assert frames > 1  # the guard on the value failed: compiled again
    else:
        assert frames == 1  # one compilation for every call
