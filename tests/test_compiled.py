"""Functions compiled with CUDA graphs have their own semantics (docs/compiled.md): the
raw-capture claims (capture fails, value frozen) are never made for them."""
from __future__ import annotations

import textwrap

import pytest

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
    # The branch on data and `print` fail to compile with fullgraph=True (on a GPU, and on
    # the CPU: test_torch_rejects_under_fullgraph); `nonzero()` compiles, so it is no CG911.
    assert lines(source) == {("CG911", 6), ("CG911", 7)}


FULLGRAPH_BREAKS = """
import logging
import time
import torch

log = logging.getLogger(__name__)

def clip(g):
    if g.norm() > 1.0:  # data-dependent branching
        g = g / g.norm()
    return g

def scale_of(x):
    peak = x.abs().max().item()
    if peak > 10:  # a branch on a number read from the tensor
        return 10 / peak
    return 1.0

def step(x):
    s = str(x)
    started = time.perf_counter()
    log.info("step")
    y = x * scale_of(x) if not bool(x.isnan().any()) else x
    while (y * y).sum() > 100:
        y = y / 2
    return clip(y)

def fine(x):
    n = x.sum().item()
    idx = x.nonzero()
    text = f"{x.max()}"
    assert torch.isfinite(x).all()
    return x * n + x[x > 0].sum() + float(x.max()) + idx.sum()
"""


def test_every_graph_break_under_fullgraph_is_cg911_through_calls():
    source = FULLGRAPH_BREAKS + """
fast = torch.compile(step, mode="reduce-overhead", fullgraph=True)
ok = torch.compile(fine, mode="reduce-overhead", fullgraph=True)
"""
    assert lines(source) == {("CG911", n) for n in (9, 15, 20, 21, 22, 23, 24)}
    # Without fullgraph=True the same lines cost speed only.
    plain = lines(source.replace(", fullgraph=True", ""))
    assert not any(code == "CG911" for code, _ in plain)
    assert {("CG203", 9), ("CG203", 24), ("CG112", 14), ("CG112", 20), ("CG112", 23), ("CG508", 22)} <= plain


def test_torch_rejects_under_fullgraph_what_cg911_reports():
    """The evidence on torch itself (CPU): each CG911 line above fails to compile with
    fullgraph=True, and the function of constructs left alone compiles."""
    torch = pytest.importorskip("torch")
    namespace: dict = {}
    exec(compile(FULLGRAPH_BREAKS, "fullgraph_breaks.py", "exec"), namespace)
    x = torch.randn(8)

    def compiles(fn) -> bool:
        torch._dynamo.reset()
        try:
            torch.compile(fn, fullgraph=True, backend="eager")(x)
        except Exception:  # noqa: BLE001 - torch raises Unsupported or UserError
            return False
        return True

    for name in ("clip", "scale_of"):
        assert not compiles(namespace[name]), name
    line = dict(enumerate(FULLGRAPH_BREAKS.splitlines(), 1))
    for number in (20, 21, 22, 23, 24):  # each construct of step() on its own
        body = line[number].strip()
        if body.startswith("while"):
            body = "while (x * x).sum() > 100:\n        x = x / 2"
        elif body.startswith("y ="):
            body = "y = x if not bool(x.isnan().any()) else x"
        source = f"def probe(x):\n    {body}\n    return x + 1\n"
        exec(compile(source, "probe.py", "exec"), namespace)
        assert not compiles(namespace["probe"]), body
    assert compiles(namespace["fine"])


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


def test_a_global_a_main_function_rebinds_to_its_compiled_version():
    # gpt-fast: `main()` does `global decode_one_token; decode_one_token = torch.compile(...)`,
    # and the decode loop of another function keeps every step's probabilities; the tokens
    # are cloned.
    source = """
    import torch

    def decode_one(model, x):
        probs = model(x).softmax(-1)
        return probs.argmax(-1), probs

    def decode_n(model, x, n):
        tokens, all_probs = [], []
        for _ in range(n):
            token, probs = decode_one(model, x)
            tokens.append(token.clone())
            all_probs.append(probs)
        return tokens, all_probs

    def main(model, x, compile=True):
        global decode_one
        if compile:
            decode_one = torch.compile(decode_one, mode="reduce-overhead")
        return decode_n(model, x, 4)
    """
    assert lines(source) == {("CG956", 13)}


def test_a_compiled_function_handed_down_two_calls():
    # gpt-fast's generate(decode_fn, ...) passes the compiled step on to decode_n_tokens, which
    # keeps every step's probabilities. `input_pos += 1` steps a parameter that may be a
    # device tensor (it is one here): no claim that a Python number recompiles the function.
    source = """
    import torch

    def decode_one(model, x, input_pos):
        probs = model(x, input_pos).softmax(-1)
        return probs.argmax(-1), probs

    def decode_n(decode_fn, model, x, input_pos, n):
        tokens, all_probs = [], []
        for _ in range(n):
            token, probs = decode_fn(model, x, input_pos)
            input_pos += 1
            tokens.append(token.clone())
            all_probs.append(probs)
        return tokens, all_probs

    def generate(decode_fn, model, x):
        input_pos = torch.zeros(1, dtype=torch.long, device=x.device)
        return decode_n(decode_fn, model, x, input_pos, 8)

    def main(model, x):
        reference = generate(decode_one, model, x)
        compiled = torch.compile(decode_one, mode="reduce-overhead")
        return reference, generate(compiled, model, x)
    """
    assert lines(source) == {("CG956", 14)}


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


GUARDED = """
import torch
try:
    from torch.compiler import is_dynamo_compiling
except ImportError:
    from torch._dynamo import is_compiling as is_dynamo_compiling
from torch.compiler import is_compiling

EAGER_LOG = []

class Estimator(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(8, 8)
        self.calls = 0

    def forward(self, x):
        y = self.proj(x)
        if not torch.compiler.is_compiling():
            print("value", y.max().item())
        if not is_dynamo_compiling() and y.sum() > 0:
            y = y / y.sum()
        return self.finish(y)

    def finish(self, y):
        if torch._dynamo.is_compiling():
            return y * 2
        self.calls += 1
        if y.isnan().any():
            raise ValueError("nan")
        return y * 2

def check(x):
    if is_compiling():
        return x
    print("eager", x.max())
    return x
"""


def test_code_the_compiled_trace_never_takes_is_not_compiled():
    """`if not is_compiling():` bodies and what follows `if is_compiling(): return` run eagerly
    only: no CG508, CG112, CG203 or CG603 there, in every spelling of the check."""
    compiled = GUARDED + """
step = torch.compile(Estimator(), mode="reduce-overhead")
fast_check = torch.compile(check, mode="reduce-overhead", fullgraph=True)
"""
    assert lines(compiled) == set()
    # The same code captured raw is not compiled: `is_compiling()` is False there, and what
    # the guards hold is captured (the raw rules report it).
    raw = GUARDED + """
model = Estimator()
g = torch.cuda.CUDAGraph()
with torch.cuda.graph(g):
    out = model(static_x)
    check(static_x)
"""
    assert {("CG101", 20), ("CG201", 21), ("CG505", 28), ("CG201", 29), ("CG103", 36)} <= lines(raw)


def test_a_project_wrapper_of_the_compiling_check(tmp_path):
    from tests.helpers import codes_lines, findings

    files = {
        "pkg/__init__.py": "",
        "pkg/utils.py": """
            def is_torchdynamo_compiling():
                try:
                    import torch
                    return torch.compiler.is_compiling()
                except Exception:
                    try:
                        import torch._dynamo as dynamo
                        return dynamo.is_compiling()
                    except Exception:
                        return False
        """,
        "pkg/model.py": """
            import torch
            from pkg.utils import is_torchdynamo_compiling

            class Head(torch.nn.Module):
                def forward(self, x):
                    if not is_torchdynamo_compiling():
                        print("eager", x.max().item())
                    return x.relu()

            head = torch.compile(Head(), mode="reduce-overhead")
        """,
    }
    assert codes_lines(findings(tmp_path, files, select=("ALL",))) == set()


def test_torch_does_not_trace_into_an_is_compiling_guard():
    """The evidence on torch (CPU): under fullgraph=True, where any graph break raises, a guarded
    print, `.item()` branch and data-dependent branch compile, because Dynamo takes the
    compiling side of the check and never traces the other."""
    torch = pytest.importorskip("torch")
    namespace: dict = {}
    exec(compile(GUARDED, "guarded.py", "exec"), namespace)
    x = torch.randn(4, 8)
    torch._dynamo.reset()
    model = namespace["Estimator"]()
    compiled = torch.compile(model, fullgraph=True, backend="eager")
    compiled(x)
    compiled(x)
    assert model.calls == 0  # `self.calls += 1` after `if is_compiling(): return` never ran
    torch._dynamo.reset()
    torch.compile(namespace["check"], fullgraph=True, backend="eager")(x)
    model(x)
    assert model.calls == 1  # eagerly, the guarded side runs


def test_methods_of_objects_known_to_be_another_class_are_not_tensor_methods():
    """A receiver known to be another class (isinstance, annotation, construction) is no
    tensor: its `tolist()` is not Tensor.tolist(); nor is a `tolist(...)` given arguments,
    which Tensor.tolist() does not take. A receiver of unknown class still is reported."""
    source = """
    import torch
    from tensordict import NonTensorStack, TensorDict, TensorDictBase, capture_non_tensor_stack

    def get(value):
        if isinstance(value, NonTensorStack) and not capture_non_tensor_stack():
            return value.tolist()
        if isinstance(value, (TensorDictBase, dict)):
            return value.tolist()
        return value.tolist()

    def linked(value):
        return value.tolist(as_linked_list=True)

    def made(x):
        out = TensorDict({"x": x}, batch_size=[4])
        return out.tolist()

    def checked(value):
        if not isinstance(value, TensorDictBase):
            raise TypeError(type(value))
        return value.tolist()

    def annotated(td: TensorDictBase, t: torch.Tensor):
        return td.tolist(), t.tolist()

    fast = [torch.compile(get, mode="reduce-overhead"), torch.compile(linked, mode="reduce-overhead"),
            torch.compile(made, mode="reduce-overhead"), torch.compile(checked, mode="reduce-overhead"),
            torch.compile(annotated, mode="reduce-overhead")]
    """
    assert lines(source) == {("CG112", 10), ("CG112", 25)}
