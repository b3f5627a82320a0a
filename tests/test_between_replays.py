"""What changes between replays, from the program rather than from spellings: a closure's cell
advanced by the loop that replays, a `functools.partial` rebuilt with a new bound value, a
getter over a global object a loop updates (each the reduced shape of a program whose replays
diverged on an H200); and what does not: a capture helper putting back a capture-mode flag or
installing its graphed forward after its own capture, once, before any replay."""
from __future__ import annotations

import textwrap

from cglint.api import check_source


def found(source: str) -> list[tuple[str, str]]:
    text = textwrap.dedent(source)
    lines = text.splitlines()
    return [(f.code, lines[f.line - 1].strip()) for f in check_source(text, "example.py") if f.severity != "info"]


def test_closure_cell_advanced_in_the_replay_loop():
    # gpt-fast's decode: the captured closure reads `pos`, the loop that replays steps it.
    assert found('''
        import torch

        def warmup_and_capture(fn, *args):
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                out = fn(*args)
            return graph, out

        def generate(model, token, steps):
            pos = 5

            def decode_one_token(m, cur):
                input_pos = torch.arange(pos, pos + 1, device=cur.device)
                return m(cur, input_pos)

            graph, out = warmup_and_capture(decode_one_token, model, token)
            for _ in range(steps):
                graph.replay()
                pos += 1
            return out
    ''') == [("CG601", "input_pos = torch.arange(pos, pos + 1, device=cur.device)")]


def test_closure_cell_the_loop_never_changes_is_no_finding():
    assert found('''
        import torch

        def generate(model, token, steps):
            pos = 5

            def decode_one_token(m, cur):
                return m(cur, torch.arange(pos, pos + 1, device=cur.device))

            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                out = decode_one_token(model, token)
            for _ in range(steps):
                graph.replay()
            return out
    ''') == []


PARTIAL = '''
    import functools
    import torch

    def scale_loss(loss, *, scale):
        return loss * scale

    class Engine:
        def __init__(self, model):
            self.module = model
            self.cur_scale = 256.0
            self._refresh()
            self.graph = None

        def _refresh(self):
            self._scale_loss = functools.partial(scale_loss, scale=self.cur_scale)

        def _fwd_bwd(self, x):
            scaled = self._scale_loss(self.module(x).sum())
            scaled.backward()
            return scaled.detach()

        def forward_backward(self, x):
            if self.graph is None:
                self.static_x = x.clone()
                self.graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(self.graph):
                    self.static_out = self._fwd_bwd(self.static_x)
            self.static_x.copy_(x)
            self.graph.replay()
            return self.static_out.clone()

        def step(self, overflow):
            if overflow:
                self.cur_scale /= 2
            REFRESH

    def main(model, batches):
        engine = Engine(model)
        for x in batches:
            engine.forward_backward(x)
            engine.step(False)
'''


def test_partial_rebuilt_between_replays():
    # DeepSpeed's loss scaler: the captured step calls the partial it held at capture.
    assert found(PARTIAL.replace("REFRESH", "self._refresh()")) == [
        ("CG601", "scaled = self._scale_loss(self.module(x).sum())"),
    ]


def test_partial_built_once_is_no_finding():
    assert found(PARTIAL.replace("REFRESH", "pass")) == []


def test_getter_over_a_global_object_the_loop_updates():
    # Megatron's num-microbatches calculator: a module global read through two getters.
    assert found('''
        import torch

        _CALC = None

        class Calculator:
            def __init__(self, n):
                self.num_micro_batches = n

            def get(self):
                return self.num_micro_batches

            def update(self, consumed):
                self.num_micro_batches = 1 + consumed // 100

        def init_calculator(n):
            global _CALC
            _CALC = Calculator(n)

        def get_num_microbatches():
            return _CALC.get()

        def update_num_microbatches(consumed):
            _CALC.update(consumed)

        def forward_step(model, x):
            return model(x).sum() / get_num_microbatches()

        def train(model, batches):
            init_calculator(4)
            static_x = torch.zeros(4, device="cuda")
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                out = forward_step(model, static_x)
            for i, x in enumerate(batches):
                static_x.copy_(x)
                g.replay()
                update_num_microbatches(i * 64)
    ''') == [("CG601", "return model(x).sum() / get_num_microbatches()")]


def test_capture_helper_resetting_its_flag_and_installing_the_graph():
    # Transformer Engine's make_graphed_callables: a capture-mode setting put in place around
    # its own capture, and the module's forward replaced by the graphed one afterwards, once.
    assert found('''
        import functools
        import torch

        _SCALE = 1.0

        def capture_scale():
            return _SCALE

        def set_capture_scale(scale):
            global _SCALE
            _SCALE = scale

        class Layer(torch.nn.Module):
            def forward(self, x):
                return x.float() * capture_scale()

        def _replay(graph, out):
            graph.replay()
            return out

        def make_graphed(module, x):
            set_capture_scale(2.0)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                out = module.forward(x)
            set_capture_scale(1.0)
            module.forward = functools.partial(_replay, graph, out)
            return module

        def build(x):
            return make_graphed(Layer(), x)
    ''') == []


OFFLOADER = '''
    import torch
    from torch import nn

    class Offloader:
        def __init__(self):
            self.module_offloaders = []

        def wrap_modules(self, modules):
            for module in modules:
                self.module_offloaders.append(module)
            return modules

        def join_after_forward(self):
            if not self.module_offloaders:
                return
            for module in self.module_offloaders:
                module.weight.add_(0)

    _offloader = Offloader()

    def get_offloader():
        return _offloader

    class Tower(nn.Module):
        def __init__(self, layers):
            super().__init__()
            self.layers = nn.ModuleList(get_offloader().wrap_modules(layers))

    def step(model, x):
        return model(x)

    def serve(model, x, steps):
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            y = step(model, x)
            get_offloader().join_after_forward()
        for _ in range(steps):
            {between}
            graph.replay()
'''


def test_state_filled_only_while_models_are_built_is_setup():
    # vLLM's prefetch offloader: `wrap_modules()` grows the list a captured branch tests, but
    # only while a model is built, a call no walk of the capture meets; a search finds it.
    assert found(OFFLOADER.format(between="pass")) == []
    # The same list grown in the loop that replays is a change between replays.
    assert found(OFFLOADER.format(between="get_offloader().wrap_modules([nn.Linear(4, 4)])")) == [
        ("CG202", "if not self.module_offloaders:")
    ]


SERVER = '''
    import torch

    class Penalty:
        def __init__(self, penalty):
            self.penalty = penalty

        def __call__(self, ids, scores):
            return scores * self.penalty

    class Temperature:
        def __init__(self, temperature):
            self.temperature = {init}

        {setter}

        def __call__(self, ids, scores):
            return scores / self.temperature

    def build_processors():
        return [Penalty(1.3), Temperature(1.0)]

    def next_token_probs(model, ids, processors):
        scores = model(ids)
        for processor in processors:
            scores = processor(ids, scores)
        return scores.softmax(-1)

    class TinyLM(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = torch.nn.Embedding(100, 32)
            self.head = torch.nn.Linear(32, 100)

        def forward(self, ids):
            return self.head(self.embed(ids))

    class DecodeServer:
        def __init__(self, model, processors):
            self.model = model
            self.processors = processors
            self.ids = torch.zeros(4, 8, dtype=torch.long, device="cuda")
            self.graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(self.graph):
                self.probs = next_token_probs(self.model, self.ids, self.processors)

        def handle(self, request):
            for processor in self.processors:
                if {guard}:
                    {update}
            self.ids.copy_(request["ids"])
            self.graph.replay()
            return self.probs.clone()

    def serve(model, requests):
        server = DecodeServer({model}, build_processors())
        return [server.handle(r) for r in requests]
'''


def test_a_setter_the_server_calls_before_each_replay_changes_the_value():
    # Hugging Face-style logits processors built by a factory and handed to a server: the
    # server updates the temperature per request, then replays.
    setter = "def update(self, temperature: float):\n            self.temperature = temperature"
    source = SERVER.format(init="temperature", setter=setter, guard="isinstance(processor, Temperature)",
                           update='processor.update(request["temperature"])', model="model")
    assert found(source) == [
        ("CG601", "return scores / self.temperature")
    ]
    # No processor can change: the value captured stays the value used.
    assert found(SERVER.format(init="temperature", setter="pass", guard="True", update="pass", model="model")) == []


def test_a_processor_updated_per_request_keeps_its_capture_time_temperature():
    # Only the processors that have `update` are updated, with a request's sampling params: the
    # captured division keeps the temperature of capture time whatever each request asks for.
    setter = 'def update(self, params):\n            self.temperature = params["temperature"]'
    source = SERVER.format(init="temperature", setter=setter, guard='hasattr(processor, "update")',
                           update='processor.update(request["sampling_params"])', model="TinyLM().cuda()")
    assert found(source) == [("CG601", "return scores / self.temperature")]


def test_a_temperature_held_in_a_tensor_and_filled_per_request_is_read_anew():
    setter = 'def update(self, params):\n            self.temperature.fill_(params["temperature"])'
    source = SERVER.format(init='torch.full((), temperature, device="cuda")', setter=setter, guard='hasattr(processor, "update")',
                           update='processor.update(request["sampling_params"])', model="TinyLM().cuda()")
    assert found(source) == []


GRAPH_PER_OFFSET = '''
    import torch

    class InferenceParams:
        def __init__(self, max_batch_size, max_sequence_length):
            self.max_sequence_length = max_sequence_length
            self.sequence_len_offset = 0
            self.key_memory = torch.zeros(max_sequence_length, max_batch_size, 64, device="cuda")

        def reset(self):
            self.sequence_len_offset = 0

    def attention(query, key, params):
        start = params.sequence_len_offset
        end = start + key.size(0)
        params.key_memory[start:end].copy_(key)
        return query @ params.key_memory[:end].transpose(0, 1)

    class DecodeGraph:
        def __init__(self, params, query, key):
            self.query, self.key = query.clone(), key.clone()
            self.graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(self.graph):
                self.out = attention(self.query, self.key, params)

        def replay(self, query, key):
            self.query.copy_(query)
            self.key.copy_(key)
            self.graph.replay()
            return self.out

    class DecodeGraphRunner:
        def __init__(self, params):
            self.params = params
            self.graphs = {{}}

        def __call__(self, query, key):
            key_ = {key_expr}
            if key_ not in self.graphs:
                self.graphs[key_] = DecodeGraph(self.params, query, key)
            return self.graphs[key_].replay(query, key)

    def generate(steps):
        params = InferenceParams(4, 128)
        runner = DecodeGraphRunner(params)
        q = torch.randn(1, 1, 64, device="cuda")
        for _ in range(steps):
            out = runner(q, q)
            params.sequence_len_offset += 1
        params.reset()
        return out
'''


def test_a_graph_per_offset_keeps_each_offset():
    # Megatron-style static batching: the runner keeps one graph per sequence offset, keyed
    # by the offset itself, so advancing it picks another graph, never a stale one.
    assert found(GRAPH_PER_OFFSET.format(key_expr="(self.params.sequence_len_offset, query.shape)")) == []


def test_one_graph_for_every_offset_slices_with_the_capture_time_offset():
    source = GRAPH_PER_OFFSET.format(key_expr="query.shape")
    assert ("CG702", "params.key_memory[start:end].copy_(key)") in found(source)


COLLECTOR = '''
    import torch

    class CudaGraphModule:
        def __init__(self, module, warmup=2):
            self.module = module
            self.counter = 0
            self._warmup = warmup
            self.graph = None

        def _record(self, observation):
            self._static_in = observation.clone()
            self.graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(self.graph):
                self._out = self.module(self._static_in)

        def __call__(self, observation):
            if self.counter < self._warmup:
                self.counter += 1
                return self.module(observation)
            if self.graph is None:
                self._record(observation)
            self._static_in.copy_(observation)
            self.graph.replay()
            return self._out

    class SyncDataCollector:
        def __init__(self, policy, frames_per_batch):
            self.policy = policy
            self.frames_per_batch = frames_per_batch

        def rollout(self, observation):
            actions = []
            for _ in range(self.frames_per_batch):
                action = self.policy(observation)
                actions.append({kept})
            return torch.stack(actions, dim=1)

    def collect(actor):
        collector = SyncDataCollector(CudaGraphModule(actor), frames_per_batch=16)
        return collector.rollout(torch.randn(8, 4, device="cuda"))
'''


def test_a_collector_built_with_a_graphed_policy_keeps_its_static_output():
    # torchrl-style: the collector gets a CudaGraphModule, whose calls return the graph's
    # static output; its rollout keeps each one, and the next replay overwrites them all.
    assert found(COLLECTOR.format(kept="action")) == [("CG955", "actions.append(action)")]


def test_a_collector_that_keeps_clones_keeps_each_frame():
    assert found(COLLECTOR.format(kept="action.clone()")) == []


# timm's per-update schedulers: the optimizer's step reads each group's `lr` as a Python float
# (a kernel scalar at capture); the scheduler the loop steps after each replay assigns it
# through a loop over the same groups, under a key the constructor names.
OPTIMIZER_AND_SCHEDULER = '''
import torch

class Lion(torch.optim.Optimizer):
    @torch.no_grad()
    def step(self):
        for group in self.param_groups:
            for p in group["params"]:
                {update}

class Scheduler:
    def __init__(self, optimizer, param_group_field="lr"):
        self.optimizer = optimizer
        self.param_group_field = param_group_field

    def step_update(self, num_updates):
        value = 0.1 / (1 + num_updates)
        for param_group in self.optimizer.param_groups:
            {write}

class CosineScheduler(Scheduler):
    def __init__(self, optimizer, t_initial):
        super().__init__(optimizer)
        self.t_initial = t_initial

def train(model, x, y, steps):
    opt = Lion(model.parameters(), lr={lr})
    sched = CosineScheduler(opt, t_initial=steps)
    graph = torch.cuda.CUDAGraph()
    graph.capture_begin()
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    opt.step()
    graph.capture_end()
    for num_updates in range(steps):
        graph.replay()
        sched.step_update(num_updates)
'''


def test_group_entry_a_scheduler_assigns_between_replays():
    source = OPTIMIZER_AND_SCHEDULER.format(
        update='p.add_(p.grad.sign(), alpha=-group["lr"] * group["weight_decay"])',
        write="param_group[self.param_group_field] = value", lr="0.02",
    )
    assert found(source) == [("CG601", 'p.add_(p.grad.sign(), alpha=-group["lr"] * group["weight_decay"])')]


def test_group_entry_written_in_place_or_another_entry_is_no_finding():
    # A tensor lr filled in place keeps the graph's pointer; a scheduler of another entry
    # leaves `lr` and `weight_decay` as captured.
    in_place = OPTIMIZER_AND_SCHEDULER.format(
        update='p.addcmul_(p.grad.sign(), group["lr"], value=-1)',
        write="param_group[self.param_group_field].fill_(value)", lr="torch.tensor(0.02, device='cuda')",
    )
    assert found(in_place) == []
    other_entry = OPTIMIZER_AND_SCHEDULER.format(
        update='p.add_(p.grad.sign(), alpha=-group["lr"] * group["weight_decay"])',
        write='param_group["momentum"] = value', lr="0.02",
    )
    assert found(other_entry) == []


# NeMo's adapters: a comprehension filters the enabled adapters at capture; the model-level
# setter fans out to every adapter module found by an `isinstance` filter over `modules()`.
ADAPTERS = '''
import torch
from torch import nn

class AdapterModuleMixin:
    def add_adapter(self, name, dim):
        if not hasattr(self, "adapter_cfg"):
            self.adapter_cfg, self.adapter_layer = {}, nn.ModuleDict()
        self.adapter_cfg[name] = {"enabled": True}
        self.adapter_layer[name] = nn.Linear(dim, dim)

    def set_enabled_adapters(self, name=None, enabled=True):
        for key in self.adapter_cfg:
            if name is None or key == name:
                self.adapter_cfg[key]["enabled"] = enabled

    def get_enabled_adapters(self):
        return [name for name, cfg in self.adapter_cfg.items() if cfg["enabled"]]

    def forward_enabled_adapters(self, x):
        for name in self.get_enabled_adapters():
            x = x + self.adapter_layer[name](x)
        return x

class AdapterModelMixin:
    def adapter_modules(self):
        return [m for m in self.modules() if isinstance(m, AdapterModuleMixin) and m is not self]

    def set_enabled_adapters(self, name=None, enabled=True):
        for module in self.adapter_modules():
            module.set_enabled_adapters(name, enabled=enabled)

    def get_enabled_adapters(self):
        return sorted({n for module in self.adapter_modules() for n in module.get_enabled_adapters()})

class Layer(nn.Module, AdapterModuleMixin):
    def __init__(self, dim):
        super().__init__()
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        return self.forward_enabled_adapters(self.proj(x))

class Encoder(nn.Module, AdapterModelMixin):
    def __init__(self, dim):
        super().__init__()
        self.layers = nn.ModuleList(Layer(dim) for _ in range(2))

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x

class Runner:
    def __init__(self, model):
        self.model = model
        self._graphed = {graphs}

    def __call__(self, x):
{call}

def serve(batches, domains):
    model = Encoder(8).cuda()
    runner = Runner(model)
    for x, domain in zip(batches, domains):
        model.set_enabled_adapters(enabled=False)
        model.set_enabled_adapters(domain, enabled=True)
        runner(x)
'''


def test_filter_on_flags_a_fan_out_setter_changes_between_replays():
    call = '''        if self._graphed is None:
            self._graphed = torch.cuda.make_graphed_callables(self.model, (torch.zeros_like(x),))
        return self._graphed(x).clone()'''
    assert found(ADAPTERS.replace("{graphs}", "None").replace("{call}", call)) == [("CG202", 'return [name for name, cfg in self.adapter_cfg.items() if cfg["enabled"]]')]


def test_filter_on_flags_that_key_the_graph_is_no_finding():
    # One graphed callable per enabled set: the flags pick a graph captured with them.
    call = '''        key = tuple(self.model.get_enabled_adapters())
        if key not in self._graphed:
            self._graphed[key] = torch.cuda.make_graphed_callables(self.model, (torch.zeros_like(x),))
        return self._graphed[key](x).clone()'''
    assert found(ADAPTERS.replace("{graphs}", "{}").replace("{call}", call)) == []


# SGLang's runner: the capture reads views of buffers held on `self.buffers`, through a
# closure; a replay that rebinds the buffers leaves every graph on the old tensors.
PAGED_RUNNER = '''
import torch
from dataclasses import dataclass

@dataclass
class InputBuffers:
    input_ids: torch.Tensor
    positions: torch.Tensor

class Runner:
    def __init__(self, model, capture_bs):
        self.model, self.capture_bs = model, capture_bs
        self.graphs, self.outputs = {}, {}
        self.buffers = InputBuffers(torch.zeros(8, dtype=torch.long, device="cuda"), torch.zeros(8, dtype=torch.long, device="cuda"))
        for bs in capture_bs:
            self.graphs[bs], self.outputs[bs] = self.capture_one(bs)

    def capture_one(self, bs):
        input_ids = self.buffers.input_ids[:bs]
        positions = self.buffers.positions[:bs]

        def run_once():
            return self.model(input_ids, positions)

        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = run_once()
        return graph, out

    def replay(self, ids, pos):
        bs = ids.shape[0]
{load}
        self.graphs[bs].replay()
        return self.outputs[bs]
'''


def test_buffers_held_by_the_runner_rebound_before_replay():
    load = "        self.buffers.input_ids = ids\n        self.buffers.positions = pos"
    assert found(PAGED_RUNNER.replace("{load}", load)) == [
        ("CG401", "self.buffers.input_ids = ids"), ("CG401", "self.buffers.positions = pos"),
    ]


def test_buffers_held_by_the_runner_copied_into_is_no_finding():
    load = "        self.buffers.input_ids[:bs].copy_(ids)\n        self.buffers.positions[:bs].copy_(pos)"
    assert found(PAGED_RUNNER.replace("{load}", load)) == []


def test_scale_of_adapters_set_through_an_isinstance_filter_between_replays():
    # PEFT's LoRA layer: adapters in ModuleDicts, a float scale multiplying their output; a
    # helper finds the layers with `isinstance` over `model.modules()` and sets the scale.
    assert found('''
        import torch
        from torch import nn

        class LoraLinear(nn.Module):
            def __init__(self, dim):
                super().__init__()
                self.base = nn.Linear(dim, dim)
                self.lora_A = nn.ModuleDict({"default": nn.Linear(dim, 2)})
                self.lora_B = nn.ModuleDict({"default": nn.Linear(2, dim)})
                self.scaling = 1.0

            def set_scale(self, scale):
                self.scaling = scale

            def forward(self, x):
                return self.base(x) + self.lora_B["default"](self.lora_A["default"](x)) * self.scaling

        def set_adapter_scale(model, scale):
            for module in model.modules():
                if isinstance(module, LoraLinear):
                    module.set_scale(scale)

        def serve(requests):
            model = nn.Sequential(LoraLinear(8), LoraLinear(8)).cuda()
            static_x = torch.zeros(4, 8, device="cuda")
            side = torch.cuda.Stream()
            with torch.cuda.stream(side):
                model(static_x)
            torch.cuda.current_stream().wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                static_y = model(static_x)
            for x, scale in requests:
                set_adapter_scale(model, scale)
                static_x.copy_(x)
                graph.replay()
                yield static_y.clone()
    ''') == [("CG601", 'return self.base(x) + self.lora_B["default"](self.lora_A["default"](x)) * self.scaling')]


INJECTED_ADAPTERS = '''
import torch
from contextlib import contextmanager
from torch import nn


class LoraLinear(nn.Module):
    def __init__(self, base_layer):
        super().__init__()
        self.base_layer = base_layer
        self.lora_A = nn.Linear(base_layer.in_features, 4, bias=False)
        self.lora_B = nn.Linear(4, base_layer.out_features, bias=False)
        self.scaling = {"default": 2.0}

    def forward(self, x):
        scaling = self.scaling["default"]
        return self.base_layer(x) + self.lora_B(self.lora_A(x)) * scaling


class Block(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        return self.proj(self.norm(x))


def inject_adapter(model):
    for module in list(model.modules()):
        for name, child in list(module.named_children()):
            if isinstance(child, nn.Linear):
                setattr(module, name, LoraLinear(child))
    return model


@contextmanager
def rescale(model, multiplier):
    saved = {}
    for module in model.modules():
        if isinstance(module, LoraLinear):
            saved[module] = module.scaling
            module.scaling = {k: v * multiplier for k, v in module.scaling.items()}
    try:
        yield
    finally:
        for module, scaling in saved.items():
            module.scaling = scaling


def serve(requests):
    model = inject_adapter(Block(16)).cuda()
    graphed = torch.cuda.make_graphed_callables(model, (torch.zeros(2, 16, device="cuda"),))
    outs = []
    for x, multiplier in requests:
        with rescale(model, multiplier):
            outs.append(BODY)
    return outs
'''


def test_adapters_swapped_in_by_name_rescaled_around_a_replay():
    # PEFT: `setattr(parent, name, LoraLinear(child))` over the model's `nn.Linear` children,
    # and `rescale_adapter_scale` around the call of the graphed model.
    assert found(INJECTED_ADAPTERS.replace("BODY", "graphed(x).clone()")) == [
        ("CG601", "return self.base_layer(x) + self.lora_B(self.lora_A(x)) * scaling")
    ]


def test_adapters_rescaled_around_an_eager_call_and_put_back_is_no_finding():
    # The graph is replayed elsewhere; the context manager restores the scale on exit.
    source = INJECTED_ADAPTERS.replace("BODY", "model(x)").replace(
        "    return outs", "    outs.extend(graphed(x).clone() for x, _ in requests)\n    return outs"
    )
    assert found(source) == []


def test_a_swap_tested_against_another_torch_class_does_not_replace_linears():
    source = INJECTED_ADAPTERS.replace("isinstance(child, nn.Linear)", "isinstance(child, nn.Conv2d)")
    assert found(source.replace("BODY", "graphed(x).clone()")) == []
