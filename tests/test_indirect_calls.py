"""Calls that no line spells out: the object a method runs on, `super()` through mixins,
decorator wrappers, module hooks, context managers, `getattr` dispatch and `**kwargs`.

Each project is shaped like real model code (a base module with overridable steps, a
profiling decorator, a debug hook, a timer, a dispatch on the decode mode); each hazard is
reached only through the indirect call, and a twin beside it that does not run stays quiet.
"""
from __future__ import annotations

from .helpers import by_file, findings

RUNNER = """
import torch
from model import {cls}

model = {cls}().cuda()
x = torch.zeros(8, 16, device="cuda")
g = torch.cuda.CUDAGraph()
with torch.cuda.graph(g):
    y = model(x)
"""


def located(tmp_path, model: str, cls: str = "Model", select=("sync", "control-flow")):
    found = findings(tmp_path, {"model.py": model, "run.py": RUNNER.format(cls=cls)}, select=select)
    return {(path, code, line) for path, code, line in by_file(found, tmp_path)}


def test_an_inherited_forward_runs_the_subclass_override(tmp_path):
    model = """
        import torch
        from torch import nn

        class Base(nn.Module):
            def forward(self, x):
                return self.project(x)

            def project(self, x):
                print("projecting", x.sum().item())
                return x

        class Model(Base):
            def project(self, x):
                return x * float(x.abs().max())
    """
    # Base.project never runs for a Model: only the override's sync is reported.
    assert located(tmp_path, model) == {("model.py", "CG101", 14)}


def test_super_walks_the_mro_of_the_object_through_mixins(tmp_path):
    model = """
        import torch
        from torch import nn

        class Core(nn.Module):
            def forward(self, x):
                return x

        class LoggingMixin:
            def forward(self, x):
                torch.cuda.synchronize()
                return super().forward(x)

        class ScaleMixin:
            def forward(self, x):
                return super().forward(x * 2)

        class Model(ScaleMixin, LoggingMixin, Core):
            pass

        class Plain(ScaleMixin, Core):
            pass
    """
    # ScaleMixin's super() is LoggingMixin for a Model, Core for a Plain.
    assert located(tmp_path, model) == {("model.py", "CG104", 10)}
    assert located(tmp_path / "plain", model, cls="Plain") == set()


def test_a_decorator_wrapper_runs_around_the_decorated_method(tmp_path):
    model = """
        import functools
        import time
        import torch
        from torch import nn

        def timed(fn):
            @functools.wraps(fn)
            def wrapper(*args, **kwargs):
                torch.cuda.synchronize()
                start = time.perf_counter()
                out = fn(*args, **kwargs)
                return out
            return wrapper

        LAYERS = {}

        def register(cls):
            torch.cuda.synchronize()  # runs when the module is imported, not at capture
            LAYERS[cls.__name__] = cls
            return cls

        @register
        class Model(nn.Module):
            @timed
            def forward(self, x):
                return self.check(x)

            def check(self, x):
                assert x.isfinite().all()
                return x
    """
    assert located(tmp_path, model) == {("model.py", "CG104", 9), ("model.py", "CG201", 29)}


def test_a_forward_hook_runs_where_its_module_runs(tmp_path):
    model = """
        import torch
        from torch import nn

        class Block(nn.Module):
            def __init__(self):
                super().__init__()
                self.fc = nn.Linear(16, 16)
                self.register_forward_hook(self._debug_stats)

            def _debug_stats(self, module, inputs, output):
                print("block mean", output.mean())

            def forward(self, x):
                return self.fc(x)

        class Head(nn.Module):
            def __init__(self):
                super().__init__()
                self.register_forward_pre_hook(self._check)

            def _check(self, module, inputs):
                assert inputs[0].isfinite().all().item()

            def forward(self, x):
                return x

        class Model(nn.Module):
            def __init__(self):
                super().__init__()
                self.block = Block()

            def forward(self, x):
                return self.block(x)
    """
    # Head is never called in the capture: its pre-hook does not run.
    assert located(tmp_path, model) == {("model.py", "CG103", 11)}


def test_a_context_manager_enters_and_exits_in_the_region(tmp_path):
    model = """
        import time
        import torch
        from torch import nn

        class CudaTimer:
            def __init__(self, name):
                self.name = name

            def __enter__(self):
                torch.cuda.synchronize()
                self.start = time.perf_counter()
                return self

            def __exit__(self, *exc):
                return False

        class Quiet:
            def __enter__(self):
                return self

            def __exit__(self, *exc):
                return False

        class Model(nn.Module):
            def forward(self, x):
                with CudaTimer("forward"), Quiet():
                    return x * 2
    """
    assert located(tmp_path, model) == {("model.py", "CG104", 10)}


def test_getattr_dispatch_on_a_built_name_runs_the_methods_it_can_spell(tmp_path):
    model = """
        import torch
        from torch import nn

        class Model(nn.Module):
            def __init__(self, mode="decode"):
                super().__init__()
                self.mode = mode

            def forward(self, x):
                return getattr(self, f"_forward_{self.mode}")(x)

            def _forward_decode(self, x):
                return x[x > 0]

            def _forward_prefill(self, x):
                return x

            def _backward_hook(self, x):
                return x.nonzero()
    """
    assert located(tmp_path, model) == {("model.py", "CG106", 13)}


def test_keyword_dicts_carry_their_values_into_the_callee(tmp_path):
    files = {
        "model.py": """
            import torch
            from torch import nn

            class Attention(nn.Module):
                def forward(self, x, scale=None, causal=True):
                    if scale > 1.0:
                        x = x / scale
                    return x

            class Model(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.attn = Attention()

                def forward(self, x, **kwargs):
                    return self.attn(x, **kwargs)
        """,
        "run.py": """
            import torch
            from model import Model

            model = Model().cuda()
            inputs = {"x": torch.zeros(8, 16, device="cuda"), "scale": torch.ones(1, device="cuda")}
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                y = model(**inputs)
        """,
    }
    found = findings(tmp_path, files, select=("control-flow",))
    assert by_file(found, tmp_path) == {("model.py", "CG201", 6)}


def test_a_registry_filled_by_a_decorator_gives_every_registered_class(tmp_path):
    files = {
        "acts.py": """
            import torch

            ACTIVATIONS = {}
            NORMS = {}

            def register(name, table=None):
                def deco(cls):
                    ACTIVATIONS[name] = cls
                    return cls
                return deco

            def register_norm(name):
                def deco(cls):
                    NORMS[name] = cls
                    return cls
                return deco

            @register("silu")
            class Silu:
                def __call__(self, x):
                    return x * torch.sigmoid(x)

            @register("clipped")
            class Clipped:
                def __call__(self, x):
                    return x.clamp(max=float(x.max()))

            @register_norm("debug")
            class DebugNorm:
                def __call__(self, x):
                    return x / x.norm().item()
        """,
        "model.py": """
            from torch import nn
            from acts import ACTIVATIONS

            class Model(nn.Module):
                def __init__(self, act="silu"):
                    super().__init__()
                    self.fc = nn.Linear(16, 16)
                    self.act = ACTIVATIONS[act]()

                def forward(self, x):
                    return self.act(self.fc(x))
        """,
        "run.py": RUNNER.format(cls="Model"),
    }
    found = findings(tmp_path, files)
    # Which activation the config names is not known: each registered one may run; the
    # norm registered in another table does not.
    assert by_file(found, tmp_path) == {("acts.py", "CG101", 26)}


def test_a_container_attribute_holds_what_its_methods_store_in_it(tmp_path):
    model = """
        import torch
        from torch import nn

        class Block(nn.Module):
            def forward(self, x):
                return x * x.norm().item()

        class Head(nn.Module):
            def forward(self, x):
                return x.nonzero()

        class Model(nn.Module):
            def __init__(self, depth=2):
                super().__init__()
                self.blocks = []
                self.heads = {}
                for _ in range(depth):
                    self.add_block()
                self.heads["unused"] = Head()

            def add_block(self):
                self.blocks.append(Block())

            def forward(self, x):
                for block in self.blocks:
                    x = block(x)
                return x
    """
    # The head is stored in another container, which the captured forward never reads.
    assert located(tmp_path, model) == {("model.py", "CG101", 6)}


def test_a_hook_on_one_submodule_runs_where_that_submodule_runs(tmp_path):
    model = """
        import torch
        from torch import nn

        class Proj(nn.Module):
            def forward(self, x):
                return x

        class Gated(nn.Module):
            def __init__(self):
                super().__init__()
                self.o_proj = Proj()
                self.o_proj.register_forward_hook(self._gate)

            def _gate(self, module, inputs, output):
                return output * float(output.sigmoid().mean())

        class Model(nn.Module):
            def __init__(self):
                super().__init__()
                self.proj = Proj()
                self.gated = Gated()

            def forward(self, x):
                return self.proj(x)
    """
    # The hook is on Gated's own `o_proj`; the captured forward calls another Proj.
    assert located(tmp_path, model) == set()
    gated = model.replace(
        "            def _gate(self, module, inputs, output):",
        "            def forward(self, x):\n                return self.o_proj(x)\n\n            def _gate(self, module, inputs, output):",
    ).replace("return self.proj(x)", "return self.gated(self.proj(x))")
    assert located(tmp_path / "gated", gated) == {("model.py", "CG101", 18)}


def test_calling_an_autograd_forward_directly_passes_ctx_itself(tmp_path):
    model = """
        import torch
        from torch import nn

        class ClampOp(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x, limit):
                if limit > 0:
                    x = x.clamp(max=limit)
                return x

        class Model(nn.Module):
            def forward(self, x):
                args = (x, 3.0)
                if torch.is_grad_enabled():
                    return ClampOp.apply(*args)
                return ClampOp.forward(None, *args)
    """
    # `limit` is the float both calls pass, never the tensor: no branch on tensor data.
    assert located(tmp_path, model) == set()


def test_getattr_with_a_default_is_not_the_default_when_the_attribute_is_unknown(tmp_path):
    model = """
        import torch
        from torch import nn

        def fused_matmul(x, w):
            return x @ w if bool(x.isfinite().all()) else x

        class Model(nn.Module):
            def __init__(self, linear):
                super().__init__()
                self.linear = linear

            def forward(self, x):
                if getattr(self.linear, "_use_fused", False):
                    return fused_matmul(x, self.linear.weight)
                return self.linear(x)
    """
    # Whether the linear layer was tagged `_use_fused` is not known: the fused path may run.
    assert located(tmp_path, model) == {("model.py", "CG101", 5)}


def test_a_declared_base_class_runs_every_override(tmp_path):
    # Transformer Engine's quantizers: the module holds a `Quantizer`, the recipe picks the
    # subclass. A call on an annotated base runs each project override; a subclass of another
    # base does not.
    model = """
        import torch
        from torch import nn

        class Quantizer:
            def quantize(self, x):
                return x

        class Fp8Quantizer(Quantizer):
            def quantize(self, x):
                return x * float(x.abs().max())

        class Logger:
            def quantize(self, x):
                print(x.sum().item())
                return x

        def apply(quantizer: Quantizer, x):
            return quantizer.quantize(x)

        class Model(nn.Module):
            def forward(self, x):
                return apply(self.quantizer, x)
    """
    assert located(tmp_path, model) == {("model.py", "CG101", 10)}


def test_hooks_a_monitor_registers_on_every_layer_run_with_the_layers(tmp_path):
    # DeepSpeed-style activation monitor: a function given the model registers a hook made by a
    # factory on each layer of `model.layers`; the hook reads the output on the host.
    files = {
        "model.py": """
            import torch
            from torch import nn

            class Layer(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.fc = nn.Linear(16, 16)

                def forward(self, x):
                    return x + self.fc(x)

            class Model(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.layers = nn.ModuleList(Layer() for _ in range(2))

                def forward(self, x):
                    for layer in self.layers:
                        x = layer(x)
                    return x
        """,
        "monitor.py": """
            class Monitor:
                def __init__(self):
                    self.peaks = {}

                def make_hook(self, name):
                    def hook(module, inputs, output):
                        self.peaks[name] = output.abs().max().item()
                    return hook

            def attach_loop(model, monitor):
                for i, layer in enumerate(model.layers):
                    layer.register_forward_hook(monitor.make_hook(f"layers.{i}"))
        """,
        "run.py": """
            import torch
            from model import Model
            from monitor import Monitor, attach_loop

            model = Model().cuda()
            attach_loop(model, Monitor())
            x = torch.zeros(8, 16, device="cuda")
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                y = model(x)
        """,
    }
    found = findings(tmp_path, files, select=("sync",))
    assert {(path, code, line) for path, code, line in by_file(found, tmp_path)} == {("monitor.py", "CG101", 7)}


def test_callbacks_a_trainer_copies_from_its_constructor_run_by_name(tmp_path):
    # Lightning's trainer: `self.callbacks = list(callbacks)`, and each hook is called through
    # `getattr(callback, hook_name)` from the captured optimization step. Only the hook the
    # captured step names runs there: `on_train_batch_end` (after replay) may sync.
    files = {
        "callbacks.py": """
            import torch

            class Callback:
                def on_before_optimizer_step(self, trainer, module):
                    pass

                def on_train_batch_end(self, trainer, module):
                    pass

            class Timer(Callback):
                def on_before_optimizer_step(self, trainer, module):
                    torch.cuda.synchronize()

            class Logger(Callback):
                def on_train_batch_end(self, trainer, module):
                    torch.cuda.synchronize()
        """,
        "trainer.py": """
            import torch

            class Trainer:
                def __init__(self, module, callbacks=()):
                    self.module = module
                    self.callbacks = list(callbacks)

                def _call_hooks(self, hook_name, *args):
                    for callback in self.callbacks:
                        getattr(callback, hook_name)(self, self.module, *args)

                def step(self):
                    self._call_hooks("on_before_optimizer_step")

                def fit(self):
                    g = torch.cuda.CUDAGraph()
                    with torch.cuda.graph(g):
                        self.step()
                    for _ in range(3):
                        g.replay()
                        self._call_hooks("on_train_batch_end")
        """,
        "run.py": """
            import torch
            from callbacks import Logger, Timer
            from trainer import Trainer

            Trainer(torch.nn.Linear(4, 4).cuda(), callbacks=[Timer(), Logger()]).fit()
        """,
    }
    found = findings(tmp_path, files, select=("sync",))
    assert {(path, code, line) for path, code, line in by_file(found, tmp_path)} == {("callbacks.py", "CG104", 12)}


def test_a_capture_through_the_device_module_a_base_runner_keeps(tmp_path):
    # SGLang's graph backends capture with `self._device_module.graph`, taken from a runner whose
    # base class set `torch.get_device_module(device)` in another module; the backend picks the
    # memory saver's context instead when one is on.
    files = {
        "runner_base.py": """
            import torch

            class BaseRunner:
                def __init__(self, model, device="cuda"):
                    self.model = model
                    self.device_module = torch.get_device_module(device)
        """,
        "graph_runner.py": """
            from runner_base import BaseRunner

            class GraphRunner(BaseRunner):
                def run_once(self, x):
                    return self.model(x)
        """,
        "backend.py": """
            from functools import partial
            from typing import TYPE_CHECKING, Any, Callable
            import torch

            if TYPE_CHECKING:
                from graph_runner import GraphRunner

            def logits_of(x):
                print("captured logits", x.sum().item())
                return x

            def twin(x):
                return x

            class FullGraphBackend:
                def __init__(self, runner: "GraphRunner", saver: Any = None):
                    self._device_module = runner.device_module
                    self._saver = saver

                def capture_one(self, forward_fn: Callable, x):
                    graph = torch.cuda.CUDAGraph()
                    graph_ctx: Callable
                    if self._saver is not None and self._saver.enabled:
                        graph_ctx = partial(self._saver.cuda_graph, tag="graph")
                    else:
                        graph_ctx = self._device_module.graph
                    with graph_ctx(cuda_graph=graph):
                        out = forward_fn(x)
                    twin(out)
                    return graph, out

            def capture_all(backend: FullGraphBackend, x):
                return backend.capture_one(logits_of, x)
        """,
    }
    found = findings(tmp_path, files, select=("sync",))
    assert by_file(found, tmp_path) == {("backend.py", "CG101", 9)}


def test_a_counter_set_from_a_number_a_method_returns_stops_on_replay(tmp_path):
    # diffusers' schedulers: `_step_index` starts from `index_for_timestep(t)` (an `.item()`) and
    # is advanced in the captured step; a tensor a helper returns is advanced in place instead.
    model = """
        import torch
        from torch import nn

        class Model(nn.Module):
            def __init__(self):
                super().__init__()
                self.sigmas = torch.linspace(1, 0, 10, device="cuda")
                self._step_index = None
                self._offsets = None

            def index_for(self, t):
                return int(t)

            def offsets_for(self, t):
                return torch.zeros(1, device="cuda")

            def start(self, t):
                self._step_index = self.index_for(t)
                self._offsets = self.offsets_for(t)

            def forward(self, x):
                self._step_index += 1
                self._offsets += 1
                return x * self.sigmas[0]
    """
    assert located(tmp_path, model, select=("host-effect",)) == {("model.py", "CG505", 22)}


def test_a_processor_a_setter_stores_from_a_registry_runs_in_forward(tmp_path):
    # diffusers' attention: `self.set_processor(ATTENTION_PROCESSORS[name]())` in __init__ and
    # `self.processor = processor` in the setter; forward calls `self.processor(self, x)`.
    model = """
        import torch
        from torch import nn

        class DefaultProcessor:
            def __call__(self, attn, x):
                return attn.proj(x)

        class PrunedProcessor:
            def __call__(self, attn, x):
                keep = torch.nonzero(x.abs().sum(-1) > 0)
                return attn.proj(x[keep[:, 0]])

        PROCESSORS = {"default": DefaultProcessor, "pruned": PrunedProcessor}

        class Model(nn.Module):
            def __init__(self, processor="default"):
                super().__init__()
                self.proj = nn.Linear(16, 16)
                self.set_processor(PROCESSORS[processor]())

            def set_processor(self, processor):
                self.processor = processor

            def forward(self, x):
                return self.processor(self, x)
    """
    assert located(tmp_path, model, select=("sync",)) == {("model.py", "CG105", 10)}


def test_entries_of_a_batch_annotated_as_a_dict_of_tensors_are_tensors(tmp_path):
    # A whole training step captured: the loss mixin gets `batch["labels"]`, a tensor the
    # annotation names, and masks with it; the twin method averages with torch.where.
    model = """
        import torch
        from torch import nn

        class LossMixin:
            ignore_index: int = -100

            def compute_loss(self, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
                active = labels != self.ignore_index
                return logits[active].mean()

            def masked_mean(self, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
                active = labels != self.ignore_index
                return torch.where(active, logits, 0).sum() / active.sum()

        class Base(nn.Module):
            def step(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
                return self.compute_loss(batch["logits"], batch["labels"]) + self.masked_mean(batch["logits"], batch["labels"])

        class Model(LossMixin, Base):
            def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
                return self.step(batch)
    """
    runner = """
        import torch
        from model import Model

        model = Model().cuda()
        loaded = {"logits": torch.zeros(8, 4), "labels": torch.zeros(8, 4, dtype=torch.long)}
        static_batch = {k: v.cuda() for k, v in loaded.items()}
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            loss = model(static_batch)
    """
    found = findings(tmp_path, {"model.py": model, "run.py": runner}, select=("dynamic-shape", "sync"))
    assert by_file(found, tmp_path) == {("model.py", "CG106", 9)}


def test_a_check_hooked_onto_every_named_submodule_runs_with_them(tmp_path):
    # Megatron/DeepSpeed-style activation checks: a checker walks `model.named_modules()` and
    # hooks every `.mlp`; the hook asserts on tensor data. The checker is given the model.
    model = """
        import functools
        import torch
        from torch import nn

        class Checker:
            def __init__(self, max_abs=1e4):
                self._hook = functools.partial(self._check, max_abs=max_abs)

            def attach(self, model: nn.Module, suffix=".mlp"):
                for name, module in model.named_modules():
                    if name.endswith(suffix):
                        module.register_forward_hook(self._hook)
                return self

            @staticmethod
            def _check(module, args, output, *, max_abs):
                assert output.abs().amax() < max_abs

        class Block(nn.Module):
            def __init__(self):
                super().__init__()
                self.mlp = nn.Sequential(nn.Linear(16, 16), nn.GELU())
                self.out = nn.Linear(16, 16)

            def forward(self, x):
                return self.out(self.mlp(x))

        class Model(nn.Module):
            def __init__(self):
                super().__init__()
                self.blocks = nn.ModuleList([Block() for _ in range(2)])

            def forward(self, x):
                for block in self.blocks:
                    x = block(x)
                return x
    """
    runner = """
        import torch
        from model import Checker, Model

        model = Model().cuda()
        Checker().attach(model)
        x = torch.zeros(8, 16, device="cuda")
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            y = model(x)
    """
    found = findings(tmp_path, {"model.py": model, "run.py": runner}, select=("control-flow",))
    assert by_file(found, tmp_path) == {("model.py", "CG201", 17)}


def test_a_tensor_passed_through_star_args_to_print(tmp_path):
    # Lightning's `self.print(...)`: a mixin method forwarding `*args` to print(); the loss
    # reaches print() only inside the tuple `args` holds. The string-only call stays quiet.
    model = """
        import torch
        from torch import nn

        class PrintMixin:
            def print(self, *args, **kwargs):
                print(*args, **kwargs)

        class Model(PrintMixin, nn.Module):
            def __init__(self):
                super().__init__()
                self.proj = nn.Linear(16, 16)

            def forward(self, x):
                loss = self.proj(x).pow(2).mean()
                self.print("step done")
                self.print("loss", loss)
                return loss
    """
    assert located(tmp_path, model, select=("sync",)) == {("model.py", "CG103", 6)}


def test_an_object_handed_down_through_two_constructors(tmp_path):
    # A NaN monitor given to the model, which gives it to each block it builds.
    model = """
        import torch
        from torch import nn

        class Monitor:
            def check(self, x):
                if not torch.isfinite(x).all():
                    raise FloatingPointError("non-finite activations")

        class Block(nn.Module):
            def __init__(self, dim, monitor):
                super().__init__()
                self.proj = nn.Linear(dim, dim)
                self.monitor = monitor

            def forward(self, x):
                x = self.proj(x)
                self.monitor.check(x)
                return x

        class Model(nn.Module):
            def __init__(self, monitor=None):
                super().__init__()
                self.blocks = nn.ModuleList([Block(16, monitor) for _ in range(2)])

            def forward(self, x):
                for block in self.blocks:
                    x = block(x)
                return x
    """
    runner = RUNNER.format(cls="Model").replace("model = Model().cuda()", "from model import Monitor\nmodel = Model(Monitor()).cuda()")
    found = findings(tmp_path, {"model.py": model, "run.py": runner}, select=("sync", "control-flow"))
    assert {(code, line) for path, code, line in by_file(found, tmp_path)} == {("CG201", 6)}


def test_calling_an_object_runs_its_call_method(tmp_path):
    # `stat = self.stats(name)`: a registry object whose `__call__` returns a recorder.
    model = """
        import torch
        from torch import nn

        class Recorder:
            def __init__(self, name):
                self.name = name

            def record(self, value):
                print(self.name, value.item())

        class Stats:
            def __call__(self, name):
                return Recorder(name)

        class Model(nn.Module):
            def __init__(self):
                super().__init__()
                self.proj = nn.Linear(16, 16)
                self.stats = Stats()

            def forward(self, x):
                y = self.proj(x)
                self.stats("mean").record(y.mean())
                return y
    """
    assert located(tmp_path, model, select=("sync",)) == {("model.py", "CG101", 9)}


SCHEDULER_PIPELINE = {
    "schedulers.py": """
        import sys
        import torch

        class DPMSolver:
            def __init__(self, steps=20):
                self.sigmas = torch.linspace(1.0, 0.0, steps + 1)
                self.counter = 0

            @classmethod
            def from_config(cls, config):
                return cls(**{k: v for k, v in config.items() if not k.startswith("_")})

            def step(self, eps, x):
                self.counter += 1
                return x - eps

        class FlowMatch:
            def __init__(self, shift=1.0):
                self.shift = shift

            @classmethod
            def from_config(cls, config):
                return cls(shift=config.get("shift", 1.0))

            def step(self, eps, x):
                return x - eps * {scale}

        def load_scheduler(config):
            scheduler_cls = getattr(sys.modules[__name__], config["_class_name"])
            return scheduler_cls.from_config(config)
    """,
    "pipe.py": """
        import torch
        from schedulers import load_scheduler

        class Pipeline:
            def __init__(self, denoiser, scheduler):
                self.denoiser = denoiser
                self.scheduler = scheduler

            @classmethod
            def from_config(cls, config):
                return cls(torch.nn.Linear(8, 8).cuda(), load_scheduler(config["scheduler"]))

            def step(self, x):
                return self.scheduler.step(self.denoiser(x), x)

        def main(config):
            pipe = Pipeline.from_config(config)
            x = torch.zeros(4, 8, device="cuda")
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                y = pipe.step(x)
    """,
}


def test_a_scheduler_picked_by_name_from_the_configuration_is_followed(tmp_path):
    # diffusers-style loading: the pipeline's classmethod builds `cls(...)` with a scheduler
    # whose class `getattr(sys.modules[__name__], config["_class_name"])` picks; every class
    # of that module may be it, so each one's `step` runs in the capture.
    files = {name: text.replace("{scale}", "x.abs().max().item()") for name, text in SCHEDULER_PIPELINE.items()}
    found = by_file(findings(tmp_path, files, select=("sync", "host-effect")), tmp_path)
    assert {(path, code, line) for path, code, line in found} == {
        ("schedulers.py", "CG505", 14),  # the step counter of one scheduler
        ("schedulers.py", "CG101", 26),  # the other's sync
    }


EVENT_STORAGE = {
    "events.py": """
        from collections import defaultdict

        _CURRENT_STORAGE_STACK = []

        def get_event_storage():
            assert _CURRENT_STORAGE_STACK, "get_event_storage() needs a `with EventStorage()`"
            return _CURRENT_STORAGE_STACK[-1]

        class EventStorage:
            def __init__(self, start_iter=0):
                self._history = defaultdict(list)
                self.iter = start_iter

            def put_scalar(self, name, value):
                self._history[name].append((float(value), self.iter))

            def __enter__(self):
                _CURRENT_STORAGE_STACK.append(self)
                return self

            def __exit__(self, *exc):
                _CURRENT_STORAGE_STACK.pop()
    """,
    "heads.py": """
        import torch
        from torch import nn

        class BoxHead(nn.Module):
            def __init__(self):
                super().__init__()
                self.fc = nn.Linear(256, 128)

            def forward(self, x):
                return self.fc(x.flatten(1))

        class ROIHeads(nn.Module):
            def __init__(self):
                super().__init__()
                self.box_head = BoxHead()
                self.cls_score = nn.Linear(128, 81)

            def forward(self, features):
                return self.cls_score(self.box_head(features))
    """,
    "train.py": """
        import torch
        from events import EventStorage, get_event_storage
        from heads import ROIHeads

        def log_box_head_inputs(module, inputs):
            get_event_storage().put_scalar("roi_heads/num_proposals", inputs[0].shape[0])

        def main():
            roi_heads = ROIHeads().cuda()
            {hook}
            static = torch.zeros(512, 256, device="cuda")
            with EventStorage(0) as storage:
                graph = torch.cuda.CUDAGraph()
                graph.capture_begin()
                out = roi_heads(static)
                graph.capture_end()
                for step in range(8):
                    graph.replay()
                    storage.put_scalar("loss", 0.0)
    """,
}


def test_a_hook_on_a_submodule_logs_into_the_current_storage_once(tmp_path):
    # detectron2: a forward pre-hook registered on `roi_heads.box_head` runs inside the
    # capture; it finds the storage on a module-level stack that `__enter__` pushes onto,
    # and its scalar is recorded at capture only.
    files = {**EVENT_STORAGE, "train.py": EVENT_STORAGE["train.py"].replace("{hook}", "roi_heads.box_head.register_forward_pre_hook(log_box_head_inputs)")}
    found = findings(tmp_path, files, select=("host-effect",))
    assert {(p, c) for p, c, _ in by_file(found, tmp_path)} == {("events.py", "CG504")}


def test_storage_written_only_after_each_replay_is_no_finding(tmp_path):
    files = {**EVENT_STORAGE, "train.py": EVENT_STORAGE["train.py"].replace("{hook}", "pass")}
    assert findings(tmp_path, files, select=("host-effect",)) == []


def test_a_runner_built_by_a_factory_function_runs_the_model_its_caller_passes(tmp_path):
    # DeepSpeed's `init_inference(model)` builds the engine that captures `self.module(...)`:
    # the model is what the script hands the factory.
    engine = """
        import torch
        from torch import nn

        class InferenceEngine(nn.Module):
            def __init__(self, model, graphs):
                super().__init__()
                self.module = model
                self.graphs = graphs

            def _create_cuda_graph(self, *inputs):
                self.graph = torch.cuda.CUDAGraph()
                self.static_inputs = inputs
                with torch.cuda.graph(self.graph):
                    self.static_output = self.module(*self.static_inputs)

        def init_inference(model, graphs=False):
            return InferenceEngine(model, graphs)
    """
    script = """
        import torch
        from torch import nn
        from engine import init_inference

        class Encoder(nn.Module):
            def forward(self, x):
                if x.max() > 0:
                    x = x * 2
                return x

        class Unused(nn.Module):
            def forward(self, x):
                if x.max() > 0:
                    x = x * 2
                return x

        engine = init_inference(Encoder().cuda().eval(), graphs=True)
        engine._create_cuda_graph(torch.zeros(4, device="cuda"))
    """
    found = findings(tmp_path, {"engine.py": engine, "run.py": script}, select=("control-flow",))
    assert {(path, code, line) for path, code, line in by_file(found, tmp_path)} == {("run.py", "CG201", 7)}


NAN_DETECTOR = """
    import torch
    from torch import nn

    class NanDetector:
        # fairseq's: a forward hook on every linear and layer norm, reporting the first NaN.
        def __init__(self, model):
            self.has_printed = False
            for name, mod in model.named_modules():
                if isinstance(mod, (nn.Linear, nn.LayerNorm)):
                    self.add_hooks(mod)

        def add_hooks(self, module):
            module.register_forward_hook(self.hook)

        def _detect(self, tensor):
            if torch.isnan(tensor).any():
                return "NaN"
            return None

        def hook(self, module, inputs, output):
            if not self.has_printed:
                err = self._detect(output)
                if err is not None:
                    SETS_FLAG
                    print(err)

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.norm = nn.LayerNorm(16)
            self.act = nn.GELU()

        def forward(self, x):
            return self.act(self.norm(x))

    model = Model().cuda()
    detector = NanDetector(model)
    x = torch.zeros(8, 16, device="cuda")
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        y = model(x)
"""


def test_a_hook_on_torch_layer_norms_runs_where_they_run(tmp_path):
    # The flag is set only when a NaN is found: on the usual call the check runs again.
    found = findings(tmp_path, {"model.py": NAN_DETECTOR.replace("SETS_FLAG", "self.has_printed = True")}, select=("sync", "control-flow"))
    assert ("model.py", "CG201", 16) in by_file(found, tmp_path)


def test_a_hook_on_torch_classes_the_model_does_not_call_is_not_followed(tmp_path):
    source = NAN_DETECTOR.replace("SETS_FLAG", "pass").replace("(nn.Linear, nn.LayerNorm)", "nn.Conv2d")
    assert by_file(findings(tmp_path, {"model.py": source}, select=("sync", "control-flow")), tmp_path) == set()


def test_imports_through_a_namespace_package_resolve(tmp_path):
    # Megatron: `megatron/` has no `__init__.py`; its packages import themselves as
    # `megatron.core...`, which must name the files under it.
    files = {
        "megatron/core/__init__.py": "from megatron.core import layers\n",
        "megatron/core/layers.py": """
            import torch

            def gate(x):
                if x.sum() > 0:
                    return x
                return -x
        """,
        "megatron/core/model.py": """
            import torch
            from torch import nn
            from megatron.core.layers import gate

            class Model(nn.Module):
                def forward(self, x):
                    return gate(x)
        """,
        "megatron/core/runner.py": RUNNER.format(cls="Model").replace("from model import", "from megatron.core.model import"),
    }
    found = findings(tmp_path, files, paths=["megatron"], select=("control-flow",))
    assert ("megatron/core/layers.py", "CG201", 4) in by_file(found, tmp_path)
