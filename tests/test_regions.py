"""Captured regions are found in every form users write, whatever the import style."""
from __future__ import annotations

import textwrap

import pytest

from cglint.api import check_source

from .helpers import CORE, by_file, findings


def lines(source: str, **kwargs) -> set[tuple[str, int]]:
    kwargs.setdefault("select", CORE)
    return {(f.code, f.line) for f in check_source(textwrap.dedent(source).lstrip("\n"), "snippet.py", **kwargs)}


@pytest.mark.parametrize(
    "imports, context",
    [
        ("import torch", "torch.cuda.graph(g)"),
        ("import torch as th", "th.cuda.graph(g)"),
        ("from torch import cuda", "cuda.graph(g)"),
        ("from torch.cuda import graph", "graph(g)"),
        ("from torch.cuda import graph as capture_graph", "capture_graph(g, pool=pool)"),
    ],
)
def test_graph_context_in_every_import_style(imports, context):
    source = f"""
{imports}

def step(x):
    return x.sum().item()

with {context}:
    y = step(static_x)
"""
    assert lines(source) == {("CG101", 4)}


def test_graph_context_imported_under_another_name_inside_a_function():
    # Functions are walked only if they call a capture form: by the name their module imports it as.
    source = """
    from torch.cuda import graph as capture_graph

    def step(x):
        return x.sum().item()

    def capture(g, static_x):
        with capture_graph(g):
            return step(static_x)
    """
    assert lines(source) == {("CG101", 4)}


def test_graph_context_inside_methods_and_nested_withs():
    source = """
    import torch

    class Runner:
        def __init__(self, model):
            self.model = model
            self.graph = torch.cuda.CUDAGraph()
            self.stream = torch.cuda.Stream()

        def capture(self, x):
            with torch.no_grad():
                with torch.cuda.stream(self.stream), torch.cuda.graph(self.graph):
                    self.out = self.model(x)
                    torch.cuda.synchronize()
            torch.cuda.synchronize()
    """
    assert lines(source) == {("CG104", 13)}


def test_capture_begin_end_span_with_try_finally():
    source = """
    import torch

    def capture(g, model, x):
        x.sum().item()
        g.capture_begin()
        try:
            out = model(x)
            n = out.max().item()
        finally:
            g.capture_end()
        return out.max().item()
    """
    assert lines(source) == {("CG101", 8)}


def test_make_graphed_callables_functions_lambdas_modules_and_tuples():
    source = """
    import torch
    from torch.cuda import make_graphed_callables

    class Head(torch.nn.Module):
        def forward(self, x):
            return x.cpu()

    def body(x):
        return x.nonzero()

    def loss_fn(x):
        return float(x.sum())

    head = Head()
    graphed = make_graphed_callables((body, head), ((a,), (b,)))
    graphed_loss = torch.cuda.make_graphed_callables(loss_fn, (c,))
    inline = torch.cuda.make_graphed_callables(lambda x: x.tolist(), (c,))
    """
    assert lines(source) == {("CG102", 6), ("CG105", 9), ("CG101", 12), ("CG102", 17)}


def test_torch_compile_reduce_overhead_as_decorator_and_call():
    source = """
    import torch

    @torch.compile(mode="reduce-overhead")
    def decorated(x):
        return x.unique()

    def called(x):
        return torch.masked_select(x, x > 0)

    def plain(x):
        return x.unique()

    fast = torch.compile(called, mode="reduce-overhead")
    also = torch.compile(plain, mode="default")
    """
    assert lines(source) == {("CG112", 5), ("CG112", 8)}  # graph breaks, not capture failures (docs/compiled.md)


def test_torch_compile_cudagraph_options_and_compiled_modules():
    source = """
    import torch

    class Net(torch.nn.Module):
        def forward(self, x):
            print(x)
            return x

    net = torch.compile(Net(), options={"triton.cudagraphs": True})
    """
    assert lines(source) == {("CG112", 5)}


def test_contextmanager_capture_helper_is_detected_across_files(tmp_path):
    files = {
        "engine/__init__.py": "",
        "engine/capture.py": """
            from contextlib import contextmanager
            import torch

            @contextmanager
            def graph_capture(graph, pool=None):
                stream = torch.cuda.Stream()
                with torch.cuda.stream(stream):
                    with torch.cuda.graph(graph, pool=pool, stream=stream):
                        yield graph
        """,
        "engine/runner.py": """
            from .capture import graph_capture

            def capture_all(model, graphs, inputs):
                for bs, graph in graphs.items():
                    with graph_capture(graph) as g:
                        out = model(inputs[bs])
                        out.max().item()
                inputs[1].sum().item()
        """,
    }
    found = findings(tmp_path, files)
    assert by_file(found, tmp_path) == {("engine/runner.py", "CG101", 7)}
    assert found[0].region.kind == "capture helper graph_capture"
    assert found[0].region.path.endswith("engine/runner.py") and found[0].region.line == 5


def test_function_that_captures_its_callable_argument(tmp_path):
    files = {
        "util.py": """
            import torch

            def capture_callable(fn, *args):
                g = torch.cuda.CUDAGraph()
                with torch.cuda.graph(g):
                    out = fn(*args)
                return g, out
        """,
        "model.py": """
            from util import capture_callable

            def logits(x):
                return x.softmax(-1).tolist()

            def main(x):
                graph, out = capture_callable(logits, x)
                return logits(x)
        """,
    }
    assert by_file(findings(tmp_path, files), tmp_path) == {("model.py", "CG102", 4)}


def test_configured_capture_functions_and_captured_names(tmp_path):
    files = {
        "serving.py": """
            from vendor_engine import cuda_graph_runner

            def decode(model, x):
                with cuda_graph_runner(model):
                    y = model(x)
                    y.cpu()

            class Model:
                def forward(self, x):
                    return x.nonzero()
        """,
    }
    config = {"capture-functions": ["cuda_graph_runner"], "captured": ["serving.Model.forward"]}
    assert by_file(findings(tmp_path, files, config), tmp_path) == {("serving.py", "CG102", 6), ("serving.py", "CG105", 10)}


def test_nothing_outside_regions_warmup_or_after_replay():
    source = """
    import torch

    def step(x):
        return x * 2

    def report(y):
        print(y)
        return y.cpu().tolist()

    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            y = step(static_x)
            print(y.sum().item())
    torch.cuda.current_stream().wait_stream(s)

    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        static_y = step(static_x)

    for _ in range(10):
        g.replay()
        print(static_y.max().item())
        report(static_y)
    """
    assert lines(source) == set()


def test_region_trace_leads_from_capture_site(tmp_path):
    files = {
        "run.py": """
            import torch
            from model import Model

            model = Model()
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                out = model(static_x)
        """,
        "model.py": """
            import torch

            class Model(torch.nn.Module):
                def forward(self, x):
                    return self.head(x)

                def head(self, x):
                    return x.max().item()
        """,
    }
    (finding,) = findings(tmp_path, files)
    assert (finding.code, finding.line, finding.column) == ("CG101", 8, 16)
    assert finding.region.kind == "torch.cuda.graph" and finding.region.line == 6
    steps = [step.split(" ", 1) for step in finding.trace]
    assert [(loc.rsplit(":", 1)[-1], text) for loc, text in steps] == [
        ("6", "with torch.cuda.graph(g)"),
        ("7", "model(static_x)"),
        ("5", "self.head(x)"),
        ("7", "Model.head"),
    ]


@pytest.mark.parametrize(
    "capture, label",
    [
        ("with torch.no_grad(), torch.cuda.graph(g):\n    y = step(static_x)", "with torch.cuda.graph(g)"),
        ("graphed = torch.cuda.make_graphed_callables(step, (x,))", "torch.cuda.make_graphed_callables(step, (x,))"),
        ("graphed = torch.cuda.make_graphed_callables(\n    step,\n    (x,),\n)", "torch.cuda.make_graphed_callables(step, (x,))"),
    ],
)
def test_trace_labels_name_the_capture_as_written(capture, label):
    # The item of a `with` that captures, not the first one; a one-element tuple keeps its
    # comma; a call written over several lines is shown on one.
    source = "import torch\n\ndef step(x):\n    return x.max().item()\n\n" + capture + "\n"
    (finding,) = check_source(source, "run.py", select=["CG101"])
    assert finding.trace[0] == f"run.py:6 {label}"
    assert finding.trace[-1] == "run.py:3 step"


def test_cudagraphs_backend_of_torch_compile():
    source = """
    import torch

    def step(x):
        return x.unique()

    fast = torch.compile(step, backend="cudagraphs")
    """
    assert lines(source) == {("CG112", 4)}


def test_graph_context_returned_by_a_device_abstraction():
    # DeepSpeed's accelerator: `capture_to_graph()` returns torch.cuda.graph(...), and the
    # engine captures under `with get_accelerator().capture_to_graph(g):`.
    source = """
    import torch

    class CudaAccelerator:
        def create_graph(self):
            return torch.cuda.CUDAGraph()

        def capture_to_graph(self, graph, pool=None, stream=None): return torch.cuda.graph(graph, pool, stream)

        def device_name(self):
            return "cuda"

    _ACCELERATOR = CudaAccelerator()

    def get_accelerator():
        return _ACCELERATOR

    class InferenceEngine:
        def __init__(self, module):
            self.module = module

        def _create_cuda_graph(self, x):
            self.graph = get_accelerator().create_graph()
            with get_accelerator().capture_to_graph(self.graph):
                self.out = self.module(x).sum().item()

        def describe(self, x):
            with get_accelerator().device_name():
                return x.sum().item()
    """
    assert lines(source) == {("CG101", 24)}  # not the `with` over device_name(), which captures nothing


def test_one_line_bodies_are_walked():
    # `def f(x): return x.item()` and `if cond: x.cpu()`: a one-line suite's statements.
    source = """
    import torch

    def total(x): return x.sum().item()

    def run(x, debug):
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            n = total(x)
            if debug: print(x.cpu())
    """
    assert lines(source) == {("CG101", 3), ("CG102", 9), ("CG103", 9)}
