"""Functions compiled with CUDA graphs have their own semantics (docs/compiled.md): the
raw-capture claims (capture fails, value frozen) are never made for them."""
from __future__ import annotations

import textwrap

from cglint.api import check_source


def lines(source: str) -> set[tuple[str, int]]:
    return {(f.code, f.line) for f in check_source(textwrap.dedent(source), "example.py")}


BODY = """
    import random
    import torch

    {mode_line}

    class Head(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = torch.nn.Linear(8, 8)

        def forward(self, x):
            y = self.proj(x) * random.uniform(0.9, 1.1)
            return y, y.max().item()

    {build}
    """


def test_mode_from_a_module_constant_and_a_parameter_default():
    constant = BODY.format(mode_line='MODE = "reduce-overhead"', build="head = torch.compile(Head(), mode=MODE)")
    default = BODY.format(mode_line="", build='def build(mode="reduce-overhead"):\n        return torch.compile(Head(), mode=mode)')
    other = BODY.format(mode_line='MODE = "max-autotune-no-cudagraphs"', build="head = torch.compile(Head(), mode=MODE)")
    # host RNG gives a new value on every compiled call: no CG301; `.item()` is a graph break
    assert lines(constant) == {("CG112", 14)}
    assert lines(default) == {("CG112", 14)}
    assert lines(other) == set()


def test_one_function_reached_from_a_raw_capture_and_a_compiled_one_gets_both_meanings():
    source = """
    import torch

    def step(x):
        return x * x.sum().item()

    fast = torch.compile(step, mode="reduce-overhead")
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out = step(static_x)
    """
    assert lines(source) == {("CG101", 5), ("CG112", 5)}


def test_fullgraph_turns_graph_breaks_into_compile_errors():
    source = """
    import torch

    @torch.compile(mode="reduce-overhead", fullgraph=True)
    def step(x):
        if x.sum() > 0:
            print("positive")
        return x.nonzero()
    """
    assert lines(source) == {("CG911", 6), ("CG911", 7), ("CG911", 8)}


def test_outputs_kept_across_calls_in_a_method_of_a_compiled_attribute():
    source = """
    import torch

    class Scorer:
        def __init__(self, model):
            self.fn = torch.compile(model, mode="reduce-overhead")

        def score_all(self, batches):
            kept, best = [], []
            for batch in batches:
                probs = self.fn(batch)
                kept.append(probs[:, 0])
                best.append(probs.argmax(-1))
            return kept, best

        def marked(self, batches):
            kept = []
            for batch in batches:
                torch.compiler.cudagraph_mark_step_begin()
                kept.append(self.fn(batch))
            return kept
    """
    assert lines(source) == {("CG956", 12)}


def test_a_sliding_window_and_a_device_counter_are_clean():
    source = """
    import torch

    def generate(model, window, steps):
        step = torch.compile(model, mode="reduce-overhead")
        position = torch.zeros((), dtype=torch.long, device="cuda")
        for i in range(steps):
            logits = step(window, position)
            position += 1
            window = torch.cat([window[:, 1:], logits[:, -1:].argmax(-1)], dim=1)
        return window
    """
    assert lines(source) == set()


def test_a_loop_counter_passed_to_a_compiled_function():
    source = """
    import torch

    def generate(model, tokens, steps):
        step = torch.compile(model, mode="reduce-overhead")
        for i in range(steps):
            tokens = step(tokens, i)
        return tokens
    """
    assert lines(source) == {("CG604", 7)}
