"""Calls are followed from a region into the project's functions, methods and submodules."""
from __future__ import annotations

from .helpers import by_file, findings

CAPTURE = """
import torch
{imports}

g = torch.cuda.CUDAGraph()
with torch.cuda.graph(g):
    out = {call}
"""


def test_imports_in_every_style_reach_other_modules(tmp_path):
    files = {
        "pkg/__init__.py": "from .ops import exported\n",
        "pkg/ops.py": """
            import torch

            def helper(x):
                return x.sum().item()

            def exported(x):
                return torch.nonzero(x)
        """,
        "pkg/sub/__init__.py": "",
        "pkg/sub/deep.py": """
            from ..ops import helper

            def deep(x):
                return helper(x)
        """,
        "pkg/sub/relative.py": """
            from . import deep

            def via_module(x):
                return deep.deep(x)
        """,
        "a.py": CAPTURE.format(imports="from pkg.ops import helper", call="helper(static_x)"),
        "b.py": CAPTURE.format(imports="import pkg.ops", call="pkg.ops.helper(static_x)"),
        "c.py": CAPTURE.format(imports="import pkg.ops as ops", call="ops.helper(static_x)"),
        "d.py": CAPTURE.format(imports="from pkg.sub.relative import via_module", call="via_module(static_x)"),
        "e.py": CAPTURE.format(imports="from pkg import exported", call="exported(static_x)"),
    }
    found = findings(tmp_path, files)
    assert by_file(found, tmp_path) == {("pkg/ops.py", "CG101", 4), ("pkg/ops.py", "CG105", 7)}
    regions = {f.region.path.rsplit("/", 1)[-1] for f in found}
    assert regions <= {"a.py", "b.py", "c.py", "d.py", "e.py"}


def test_methods_submodules_containers_and_base_classes(tmp_path):
    files = {
        "net/__init__.py": "",
        "net/blocks.py": """
            import torch
            from torch import nn

            class Norm(nn.Module):
                def forward(self, x):
                    return x / x.norm()

            class Base(nn.Module):
                def forward(self, x):
                    return self.extra(x)

                def extra(self, x):
                    return x.unique()

            class Block(Base):
                def __init__(self, dim):
                    super().__init__()
                    self.norm = Norm()
                    self.proj = nn.Linear(dim, dim)

                def forward(self, x):
                    x = super().forward(self.norm(x))
                    return self.proj(x)

            class Leaf(nn.Module):
                def forward(self, x):
                    return x.cpu()
        """,
        "net/model.py": """
            import torch
            from torch import nn
            from .blocks import Block, Leaf

            class Model(nn.Module):
                def __init__(self, dim, depth):
                    super().__init__()
                    self.blocks = nn.ModuleList([Block(dim) for _ in range(depth)])
                    self.tail = nn.Sequential(Leaf(), nn.ReLU())

                @classmethod
                def build(cls, dim):
                    return cls(dim, 2)

                def forward(self, x):
                    for block in self.blocks:
                        x = block(x)
                    return self.finish(self.tail(x))

                def finish(self, x):
                    torch.cuda.synchronize()
                    return x
        """,
        "train.py": """
            import torch
            from net.model import Model

            def capture(x):
                model = Model(16, 2)
                g = torch.cuda.CUDAGraph()
                with torch.cuda.graph(g):
                    y = model(x)
                return g, y
        """,
    }
    assert by_file(findings(tmp_path, files), tmp_path) == {
        ("net/blocks.py", "CG107", 13),
        ("net/blocks.py", "CG102", 27),
        ("net/model.py", "CG104", 21),
    }


def test_recursion_and_mutual_calls_terminate(tmp_path):
    files = {
        "loop.py": """
            import torch

            def ping(x, n):
                if n > 0:
                    return pong(x, n - 1)
                return x.tolist()

            def pong(x, n):
                return ping(x, n)

            with torch.cuda.graph(g):
                y = ping(static_x, 3)
        """
    }
    assert by_file(findings(tmp_path, files), tmp_path) == {("loop.py", "CG102", 6)}


def test_a_hazard_reached_from_two_captures_is_reported_once(tmp_path):
    files = {
        "two.py": """
            import torch

            def shared(x):
                return x.max().item()

            with torch.cuda.graph(g1):
                a = shared(x1)
            with torch.cuda.graph(g2):
                b = shared(x2)
        """
    }
    found = findings(tmp_path, files)
    assert [(f.code, f.line) for f in found] == [("CG101", 4)]
    assert found[0].region.line == 6


def test_scripts_resolve_sibling_modules_of_their_own_folder(tmp_path):
    # Two example folders with a module of the same name: each script imports its own.
    files = {
        "one/model.py": "def forward(x):\n    return x.cpu()\n",
        "one/run.py": CAPTURE.format(imports="from model import forward", call="forward(static_x)"),
        "two/model.py": "def forward(x):\n    return x.unique()\n",
        "two/run.py": CAPTURE.format(imports="from model import forward", call="forward(static_x)"),
    }
    found = findings(tmp_path, files)
    assert by_file(found, tmp_path) == {("one/model.py", "CG102", 2), ("two/model.py", "CG107", 2)}
    for finding in found:
        assert finding.region.path.split("/")[-2] == finding.path.split("/")[-2]


def test_checking_one_file_reads_the_modules_it_calls(tmp_path):
    files = {
        "app/__init__.py": "",
        "app/model.py": "def forward(x):\n    return x.nonzero()\n",
        "app/run.py": CAPTURE.format(imports="from app.model import forward", call="forward(static_x)"),
        "app/other.py": "def unrelated(x):\n    return x.cpu()\n",
    }
    found = findings(tmp_path, files, paths=["app/run.py"])
    assert by_file(found, tmp_path) == {("app/model.py", "CG105", 2)}
    assert found[0].region.path.endswith("app/run.py")


def test_a_runner_reaches_the_model_its_constructor_was_given(tmp_path):
    # An engine's graph runner gets its model from a script: `self.model = model`.
    files = {
        "runner.py": """
            import torch

            class GraphRunner:
                def __init__(self, model, sizes):
                    self.model = model
                    self.sizes = sizes
                    self.graphs = {}

                def capture(self, inputs):
                    for bs in self.sizes:
                        graph = torch.cuda.CUDAGraph()
                        with torch.cuda.graph(graph):
                            out = self.model(inputs[bs])
                        self.graphs[bs] = (graph, out)
        """,
        "model.py": """
            import torch

            class Net(torch.nn.Module):
                def forward(self, x):
                    return x * x.abs().max().item()
        """,
        "serve.py": """
            from model import Net
            from runner import GraphRunner

            def main(inputs):
                net = Net().cuda().eval()
                runner = GraphRunner(net, [1, 2, 4])
                runner.capture(inputs)
        """,
    }
    assert by_file(findings(tmp_path, files), tmp_path) == {("model.py", "CG101", 5)}


# A decode loop written like flash-attn's and mamba-ssm's: the capture helper gets the model
# as a parameter, three calls away from a mixin method that passes `self`; the model builds
# its layers with a factory, picks its norm with a branch, gets its mixer as a `partial`
# class, and runs a custom autograd op.
GENERATION_PACKAGE = {
    "lm/__init__.py": "",
    "lm/generation.py": """
        import torch

        def capture_graph(model, input_ids):
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                logits = model(input_ids)
            return graph, logits

        def update_graph_cache(model, cache, input_ids):
            cache.graph, cache.logits = capture_graph(model, input_ids)
            return cache

        def decode(input_ids, model, cache):
            return update_graph_cache(model, cache, input_ids)

        class GenerationMixin:
            def generate(self, input_ids, cache):
                return decode(input_ids, self, cache)
    """,
    "lm/ops.py": """
        import torch

        class ScaleOp(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x, scale):
                return x * scale.item()

        scale_op = ScaleOp.apply
    """,
    "lm/layers.py": """
        from functools import partial
        import torch
        from torch import nn
        from .ops import scale_op

        class RMSNorm(nn.Module):
            def forward(self, x):
                return x.nonzero()

        class Mixer(nn.Module):
            def __init__(self, dim, heads=1):
                super().__init__()
                self.heads = heads

            def forward(self, x):
                return scale_op(x, x.amax())

        class Block(nn.Module):
            def __init__(self, dim, mixer_cls, norm_cls=nn.LayerNorm):
                super().__init__()
                self.mixer = mixer_cls(dim)
                self.norm = norm_cls(dim)

            def forward(self, x):
                return self.mixer(self.norm(x))

        def create_block(dim, rms):
            mixer_cls = partial(Mixer, heads=4)
            norm_cls = RMSNorm if rms else nn.LayerNorm
            block = Block(dim, mixer_cls, norm_cls=norm_cls)
            return block
    """,
    "lm/model.py": """
        from torch import nn
        from .generation import GenerationMixin
        from .layers import create_block

        class LMHead(nn.Module, GenerationMixin):
            def __init__(self, dim, depth):
                super().__init__()
                self.layers = nn.ModuleList([create_block(dim, rms=True) for _ in range(depth)])

            def forward(self, x):
                for layer in self.layers:
                    x = layer(x)
                return x.tolist()
    """,
}


def test_values_flow_through_parameters_factories_partials_and_autograd_ops(tmp_path):
    found = findings(tmp_path, GENERATION_PACKAGE, paths=["lm"])
    assert by_file(found, tmp_path) == {
        ("lm/model.py", "CG102", 13),  # x.tolist() in the model passed as `self` three calls up
        ("lm/layers.py", "CG105", 8),  # nonzero in the norm picked by a branch in the factory
        ("lm/ops.py", "CG101", 6),  # .item() in the autograd op's forward, through `scale_op = ScaleOp.apply`
    }


def test_a_class_nothing_constructs_or_derives_is_not_reached(tmp_path):
    files = dict(GENERATION_PACKAGE)
    files["lm/unused.py"] = """
        from torch import nn

        class Other(nn.Module):
            def forward(self, x):
                return x.cpu()

        def generate_other(x):
            return Other()(x)
    """
    found = findings(tmp_path, files, paths=["lm"])
    assert not [f for f in found if f.path.endswith("unused.py")]


def test_a_closure_made_by_a_factory_passed_to_the_base_class_is_followed(tmp_path):
    # vLLM's graph manager: the subclass hands the base's capture loop a factory of closures;
    # the closure reads the model from the method that defines it.
    files = {
        "serve/__init__.py": "",
        "serve/runner.py": """
            import torch
            from torch import nn

            class Model(nn.Module):
                def forward(self, x):
                    return x.nonzero()

            class GraphManager:
                def capture(self, create_forward_fn):
                    for size in (1, 2):
                        forward_fn = create_forward_fn(size)
                        forward_fn()
                        graph = torch.cuda.CUDAGraph()
                        with torch.cuda.graph(graph):
                            forward_fn()

            class ModelGraphManager(GraphManager):
                def capture(self, inputs):
                    model = Model()

                    def create_forward_fn(size):
                        batch = inputs[:size]

                        def forward_fn():
                            return model(batch)

                        return forward_fn

                    super().capture(create_forward_fn)
        """,
    }
    assert by_file(findings(tmp_path, files), tmp_path) == {("serve/runner.py", "CG105", 6)}


def test_values_unpacked_from_star_arguments_keep_their_kinds(tmp_path):
    # A trainer captured through `train_step(*static_batch)`, whose loss masks by a boolean
    # tensor, and a wrapper forwarding `*inputs` to the layer it wraps.
    files = {
        "train.py": """
            import torch
            from torch import nn

            def masked_loss(logits, labels, mask):
                return (logits[mask] - labels[mask]).pow(2).mean()

            class Inner(nn.Module):
                def forward(self, x, scale):
                    return x.nonzero() if scale else x

            class Wrapper(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.inner = Inner()

                def forward(self, *inputs):
                    return self.inner(*inputs)

            class Trainer:
                def __init__(self):
                    self.net = Wrapper()

                def train_step(self, *batch):
                    x, labels, mask = batch
                    return masked_loss(self.net(x, True), labels, mask)

            def main():
                trainer = Trainer()
                x = torch.zeros(4, device="cuda")
                static_batch = (x, torch.zeros(4, device="cuda"), x > 0)
                g = torch.cuda.CUDAGraph()
                with torch.cuda.graph(g):
                    loss = trainer.train_step(*static_batch)
        """,
    }
    assert by_file(findings(tmp_path, files), tmp_path) == {("train.py", "CG106", 5), ("train.py", "CG105", 9)}


# Shapes from a fresh set of GPU-confirmed programs modelled on torchrl, Transformer Engine and
# SGLang (each hazard below failed capture or replayed wrong on an H200 in its program).
def test_star_constructors_graphed_tuples_run_once_and_dataclass_fields(tmp_path):
    files = {
        "policy.py": """
            import random
            import torch
            from torch import nn

            class Noise(nn.Module):
                def forward(self, x):
                    return x * random.uniform(0.7, 1.3)

            class Sequential(nn.Module):
                def __init__(self, *modules):
                    super().__init__()
                    self.module = nn.ModuleList(modules)

                def forward(self, x):
                    for m in self.module:
                        x = m(x)
                    return x

            def main(x):
                policy = Sequential(nn.Linear(4, 4), Noise())
                g = torch.cuda.CUDAGraph()
                with torch.cuda.graph(g):
                    y = policy(x)
        """,
        "layers.py": """
            import torch
            from torch import nn

            class Layer(nn.Module):
                def forward(self, x):
                    print("act", x.amax())
                    return x

            def build(n):
                return nn.ModuleList(Layer() for _ in range(n)).to("cuda")

            def main(x):
                layers = build(2)
                graphed = torch.cuda.make_graphed_callables(tuple(layers), ((x,), (x,)))
        """,
        "runner.py": """
            from dataclasses import dataclass
            import torch

            @dataclass
            class Batch:
                ids: torch.Tensor
                mask: torch.Tensor

            def top_logprobs(logits, batch: Batch):
                return logits[batch.mask]

            class Runner:
                def __init__(self, model):
                    self.model = model
                    self.mask = torch.zeros(8, dtype=torch.bool, device="cuda")
                    self.ids = torch.zeros(8, dtype=torch.long, device="cuda")

                def capture_one(self, bs):
                    batch = Batch(self.ids[:bs], self.mask[:bs])

                    def run_once():
                        return top_logprobs(self.model(batch.ids), batch)

                    graph = torch.cuda.CUDAGraph()
                    with torch.cuda.graph(graph):
                        out = run_once()
                    return graph, out
        """,
    }
    assert by_file(findings(tmp_path, files), tmp_path) == {
        ("policy.py", "CG301", 7),  # host RNG in a module held by a *modules constructor
        ("layers.py", "CG103", 6),  # print of a tensor in layers graphed as tuple(layers)
        ("runner.py", "CG106", 10),  # a bool mask held in a dataclass, captured through run_once()
    }


def test_a_partial_keeps_the_arguments_it_binds(tmp_path):
    # transformers-style decode: the step is partial(decode_step, scores=None); the branch
    # on `scores` is ruled out by the bound None, so its `.item()` is not captured code.
    files = {
        "gen.py": """
            from functools import partial
            import torch

            def decode_step(x, scale, check=None):
                if check is not None:
                    check(x.sum().item())
                return x * scale.amax().item()

            def main(x, scale):
                step = partial(decode_step, scale=scale, check=None)
                g = torch.cuda.CUDAGraph()
                with torch.cuda.graph(g):
                    y = step(x)
        """,
    }
    assert by_file(findings(tmp_path, files), tmp_path) == {("gen.py", "CG101", 7)}
