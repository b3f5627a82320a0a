"""False positives seen on real engine code with `captured` configured (vLLM, SGLang,
Megatron-Core, diffusers), each reduced to its original's shape, with a real hazard beside
it that must still be reported."""
from __future__ import annotations

from tests.helpers import capture_script, codes_lines, findings

HOST = ["CG101", "CG202", "CG306", "CG501", "CG502", "CG503", "CG504", "CG601", "CG702"]


def test_memo_filled_by_a_helper_method_runs_at_warmup_only(tmp_path):
    # vLLM's cute_dsl/ll_bf16.py: `if key not in self._cache: self._compile(key)`, where
    # _compile stores into the cache and logs. After warmup the kernel comes from the cache.
    found = findings(
        tmp_path,
        {
            "gemm.py": """
            import logging
            import torch

            logger = logging.getLogger(__name__)

            class Gemm:
                def __init__(self):
                    self._compiled_cache = {}

                def _compile(self, key):
                    kernel = torch.compile(torch.mm)
                    self._compiled_cache[key] = kernel
                    logger.debug("compiled %s", key)

                def __call__(self, a, b):
                    key = (a.shape[0], a.dtype)
                    if key not in self._compiled_cache:
                        self._compile(key)
                    out = self._compiled_cache[key](a, b)
                    logger.info("gemm %s", out.sum().item())
                    return out
            """,
            "run.py": capture_script("from gemm import Gemm\ngemm = Gemm()", "y = gemm(x, x)"),
        },
        select=HOST,
    )
    assert codes_lines(found) == {("CG101", 20), ("CG502", 20)}


def test_early_return_from_a_seen_set_skips_the_recording_below(tmp_path):
    # SGLang's runtime_context.py: `if (role, name) in _SEEN: return`, then record and print.
    found = findings(
        tmp_path,
        {
            "record.py": """
            _SEEN = set()

            def record(role, name):
                if (role, name) in _SEEN:
                    return
                _SEEN.add((role, name))
                print(f"read {role} {name}")

            def lookup(table, cache, key):
                if key in cache:
                    return cache[key]
                print("miss", key)  # `cache` is a parameter: filled per call, not a memo
                return table[key]

            def step(x):
                record("decode", "scale")
                return lookup({}, {}, "k") * x
            """,
            "run.py": capture_script("from record import step", "y = step(x)"),
        },
        select=HOST,
    )
    assert codes_lines(found) == {("CG501", 12)}


def test_compare_with_cached_copy_and_once_functions(tmp_path):
    # vLLM's backend chosen again only when its inputs change; SGLang's `@cache_once`
    # JIT loaders and `_init_jit_cuda_arch_once()`.
    found = findings(
        tmp_path,
        {
            "backend.py": """
            import logging

            logger = logging.getLogger(__name__)
            _STATE = {"params": None, "backend": None}

            def cache_once(fn):
                return fn

            @cache_once
            def load_kernel(name):
                logger.warning("building %s", name)
                return name

            def _init_arch_once():
                logger.warning("Cannot detect CUDA architecture.")

            def pick_backend(params):
                if params != _STATE["params"]:
                    logger.info("choosing a backend for %s", params)
                    _STATE["backend"] = "triton"
                    _STATE["params"] = params
                return _STATE["backend"]

            def attention(x, heads):
                _init_arch_once()
                load_kernel("attn")
                backend = pick_backend((heads, 64))
                logger.debug("attention with %s", backend)
                return x
            """,
            "run.py": capture_script("from backend import attention", "y = attention(x, 8)"),
        },
        select=HOST,
    )
    assert codes_lines(found) == {("CG502", 28)}


def test_setters_nobody_calls_between_replays_are_configuration(tmp_path):
    # diffusers' `enable_tiling()`, Megatron's `set_pipeline_model_parallel_rank()`, SGLang's
    # `set_fused_op_backend()`: configuration API run while building, never seen between
    # replays. A setter called in the replay loop still changes what the graph froze.
    found = findings(
        tmp_path,
        {
            "model.py": """
            import torch

            _BACKEND = "auto"

            def set_backend(name):
                global _BACKEND
                _BACKEND = name

            class Decoder(torch.nn.Module):
                def __init__(self):
                    super().__init__()
                    self.use_tiling = False
                    self.temperature = 1.0
                    self.calls = 0

                def enable_tiling(self):
                    self.use_tiling = True

                def set_temperature(self, t):
                    self.temperature = t

                def forward(self, x):
                    self.calls += 1
                    if self.use_tiling:
                        x = x * 2
                    if _BACKEND == "triton":
                        x = x + 1
                    if self.calls % 100 == 0:
                        x = x - 1
                    if self.temperature > 0.5:
                        x = x / 2
                    return x
            """,
            "run.py": """
            import torch
            from model import Decoder

            model = Decoder()
            g = torch.cuda.CUDAGraph()
            x = torch.zeros(4, device="cuda")
            with torch.cuda.graph(g):
                y = model(x)
            for t in (0.7, 0.9):
                model.set_temperature(t)
                g.replay()
            """,
        },
        select=["CG202"],
    )
    # Line 28 (`self.calls % 100`) reads a counter only the captured forward steps: CG505's, at the write.
    assert codes_lines(found) == {("CG202", 30)}


def test_helper_only_configuration_api_calls_is_setup(tmp_path):
    # vLLM's EagleModelMixin: `_set_aux_hidden_state_layers()` calls `_cache_aux_pp_layout()`,
    # which stores an annotated `int` that the captured forward adds to. Nothing calls either
    # between replays. A step counter the replay loop advances still changes what was frozen.
    found = findings(
        tmp_path,
        {
            "model.py": """
            import torch

            class Mixin:
                _slot_base: int = 0
                step: int = 0

                def set_aux_layers(self, layers):
                    self.layers = layers
                    self._cache_layout()

                def _cache_layout(self):
                    self._slot_base = len(self.layers) // 2

                def advance(self):
                    self.step = self.step + 1

                def forward(self, x):
                    y = x * self._slot_base
                    return y + x * self.step
            """,
            "run.py": """
            import torch
            from model import Mixin

            model = Mixin()
            model.set_aux_layers((1, 2, 3))
            g = torch.cuda.CUDAGraph()
            x = torch.zeros(4, device="cuda")
            with torch.cuda.graph(g):
                y = model.forward(x)
            for _ in range(3):
                model.advance()
                g.replay()
            """,
        },
        select=["CG601"],
    )
    assert codes_lines(found) == {("CG601", 19)}


def test_flag_saved_and_restored_around_eager_code_does_not_change(tmp_path):
    # Megatron's TransformerLayer: after a graph replay it clears `recompute_pre_mlp_layernorm`
    # around an eager call and restores it.
    found = findings(
        tmp_path,
        {
            "layer.py": """
            import torch

            class Layer(torch.nn.Module):
                def __init__(self, recompute):
                    super().__init__()
                    self.recompute = recompute
                    self.graph = None

                def forward(self, x):
                    if self.recompute:
                        x = x * 2
                    return x

                def post(self, y):
                    return y + 1

                def replay_step(self, y):
                    self.graph.replay()
                    saved = self.recompute
                    self.recompute = False
                    out = self.post(y)
                    self.recompute = saved
                    return out
            """,
            "run.py": """
            import torch
            from layer import Layer

            layer = Layer(True)
            x = torch.zeros(4, device="cuda")
            layer.graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(layer.graph):
                y = layer(x)
            for _ in range(3):
                out = layer.replay_step(y)
            """,
        },
        select=["CG202"],
    )
    assert codes_lines(found) == set()


def test_cpu_generator_state_saved_around_captured_code_is_allowed(tmp_path):
    # Megatron's `_get_all_rng_states()`: `torch.get_rng_state()` is the CPU generator.
    found = findings(
        tmp_path,
        {
            "ckpt.py": """
            import torch

            def run_block(block, x):
                cpu_state = torch.get_rng_state()
                cuda_state = torch.cuda.get_rng_state()
                out = block(x)
                torch.set_rng_state(cpu_state)
                return out
            """,
            "run.py": capture_script("from ckpt import run_block", "y = run_block(torch.nn.Identity(), x)"),
        },
        select=["CG306"],
    )
    assert codes_lines(found) == {("CG306", 5)}


def test_lazily_filled_global_behind_and_is_not_changed_by_its_callers(tmp_path):
    # Megatron's `get_te_version()`: `if _te_version is None and HAVE_TE:` fills a global once;
    # `is_te_min_version()` called between replays only reads it. A setter called there
    # still counts.
    found = findings(
        tmp_path,
        {
            "utils.py": """
            HAVE_TE = True
            _te_version = None
            _fp8 = False

            def get_te_version():
                global _te_version
                if _te_version is None and HAVE_TE:
                    _te_version = (2, 2)
                return _te_version

            def is_te_min_version(v):
                return get_te_version() >= v

            def set_fp8(on):
                global _fp8
                _fp8 = on

            def attention(x):
                if _te_version is not None and _te_version >= (2, 0):
                    x = x + 1
                if _fp8:
                    x = x * 2
                return x
            """,
            "run.py": capture_script("from utils import attention, is_te_min_version, set_fp8", "y = attention(x)")
            + "for step in range(3):\n    if is_te_min_version((2, 1)):\n        set_fp8(step > 0)\n    g.replay()\n",
        },
        select=["CG202"],
    )
    assert codes_lines(found) == {("CG202", 21)}


def test_attribute_of_another_class_is_not_the_one_read(tmp_path):
    # NeMo: the greedy and the beam decoders each keep a state object with a
    # `fusion_states_list`; the beam decoder reinitialising its own state between replays
    # does not change the greedy decoder's. Writing the greedy state does.
    found = findings(
        tmp_path,
        {
            "decoders.py": """
            import torch

            class GreedyState:
                def __init__(self):
                    self.scale = 1.0

            class BeamState:
                def __init__(self):
                    self.scale = 1.0

            class BeamComputer:
                def __init__(self):
                    self.state = BeamState()

                def reinitialize(self, scale):
                    self.state.scale = scale

            class GreedyComputer:
                def __init__(self):
                    self.state = GreedyState()

                def rescale(self, scale):
                    self.state.scale = scale

                def step(self, x):
                    return x * self.state.scale
            """,
            "run.py": """
            import torch
            from decoders import BeamComputer, GreedyComputer

            greedy, beam = GreedyComputer(), BeamComputer()
            g = torch.cuda.CUDAGraph()
            x = torch.zeros(4, device="cuda")
            with torch.cuda.graph(g):
                y = greedy.step(x)
            for scale in (0.5, 2.0):
                beam.reinitialize(scale)
                g.replay()
            greedy.rescale(3.0)
            g.replay()
            """,
        },
        select=["CG601"],
    )
    assert codes_lines(found) == {("CG601", 26)}
    # The finding is explained by the greedy state's own setter, not by the beam decoder's.
    (finding,) = found
    assert "GreedyComputer.rescale()" in finding.message and "reinitialize" not in finding.message


def test_state_rebuilt_by_a_function_that_captures_again_is_not_stale(tmp_path):
    # NeMo's label-looping decoder: when the batch outgrows the state, `_graph_reinitialize`
    # builds a new state and captures the graphs again; the new graphs read the new state.
    found = findings(
        tmp_path,
        {
            "decoder.py": """
            import torch

            class State:
                def __init__(self, batch):
                    self.batch = batch
                    self.scale = 1.0
                    self.x = torch.zeros(batch, device="cuda")

            class Decoder:
                def __init__(self):
                    self.state = None
                    self.graph = None

                def _reinitialize(self, batch):
                    self.state = State(batch)
                    self.state.scale = 0.5
                    self._compile()

                def _compile(self):
                    self._warmup()
                    self._capture()

                def _warmup(self):
                    self.out = self.state.x * self.state.scale

                def _capture(self):
                    self.graph = torch.cuda.CUDAGraph()
                    with torch.cuda.graph(self.graph):
                        self.out = self.state.x * self.state.scale

                def __call__(self, x):
                    if self.state is None or x.shape[0] > self.state.batch:
                        self._reinitialize(x.shape[0])
                    self.state.x[: x.shape[0]].copy_(x)
                    self.graph.replay()
                    return self.out
            """,
        },
        select=["CG601", "CG202"],
    )
    assert codes_lines(found) == set()


def test_cache_searched_with_for_else_is_filled_at_warmup(tmp_path):
    # Transformer Engine: the attention backend for a set of parameters is looked up in a
    # small list; only a miss (the `else` of the search loop) selects it, logging the choice.
    found = findings(
        tmp_path,
        {
            "select.py": """
            import logging

            logger = logging.getLogger(__name__)
            _backend_cache = []

            def select_backend(params):
                logger.debug("selecting for %s", params)
                return "flash"

            def backend_for(params):
                for index, (cached_params, cached) in enumerate(_backend_cache):
                    if cached_params == params:
                        selection = cached
                        break
                else:
                    selection = select_backend(params)
                    _backend_cache.append((params, selection))
                logger.info("running with %s", selection)
                return selection

            def attention(x, heads):
                backend_for((heads, 64))
                return x
            """,
            "run.py": capture_script("from select import attention", "y = attention(x, 8)"),
        },
        select=HOST,
    )
    assert codes_lines(found) == {("CG502", 18)}


def test_in_place_writes_into_a_captured_tensor_rebind_nothing(tmp_path):
    # mamba-ssm's generation.py: before each replay `inference_params.lengths_per_sample[:] =
    # seqlen` writes into the tensor the graph reads; a captured `is not None` branch on it
    # is not frozen. A step counter rebound in the same loop still is.
    found = findings(
        tmp_path,
        {
            "decode.py": """
            import torch

            class Params:
                def __init__(self, lengths):
                    self.lengths_per_sample = lengths
                    self.step = 0

            def attend(x, params):
                if params.lengths_per_sample is not None:
                    x = x + params.lengths_per_sample
                if params.step > 0:
                    x = x * 2
                return x

            def generate(x, lengths, steps):
                params = Params(lengths)
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph):
                    out = attend(x, params)
                for seqlen in range(steps):
                    params.lengths_per_sample[:] = seqlen
                    params.step = seqlen
                    graph.replay()
                return out
            """,
        },
    )
    assert codes_lines(f for f in found if f.code == "CG202") == {("CG202", 11)}


def test_a_write_made_by_the_captured_call_itself_is_no_change_between_replays(tmp_path):
    # Transformer Engine's quantized tensors: the captured forward calls a method that fills
    # `_transpose` on a cache miss; nothing outside the capture calls it, so the branch on it
    # sees the same value at capture and at every replay. A setter the loop calls still counts.
    found = findings(
        tmp_path,
        {
            "quant.py": """
            import torch

            class Workspace:
                def __init__(self, data):
                    self._data = data
                    self._transpose = None
                    self.scale = 1.0

                def _create_transpose(self):
                    self._transpose = torch.transpose_copy(self._data, 0, 1, out=self._transpose)

                def set_scale(self, s):
                    self.scale = s

                def forward(self, x):
                    if self._transpose is None:
                        self._create_transpose()
                    if self.scale > 1.0:
                        x = x * 2
                    return x @ self._transpose

            def run(x, w, scales):
                ws = Workspace(w)
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph):
                    y = ws.forward(x)
                for s in scales:
                    ws.set_scale(s)
                    graph.replay()
                return y
            """,
        },
    )
    assert codes_lines(f for f in found if f.code == "CG202") == {("CG202", 18)}


def test_a_private_writer_counts_where_the_replay_loop_runs_it(tmp_path):
    # The same private writer, run between replays through a public method, changes the state.
    found = findings(
        tmp_path,
        {
            "cursor.py": """
            import torch

            class Cursor:
                def __init__(self):
                    self.offset = 0

                def _bump(self):
                    self.offset += 1

                def advance(self):
                    self._bump()

                def forward(self, x):
                    if self.offset > 0:
                        x = x * 2
                    return x

            def run(x, steps):
                cursor = Cursor()
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph):
                    y = cursor.forward(x)
                for _ in range(steps):
                    cursor.advance()
                    graph.replay()
                return y
            """,
        },
    )
    assert codes_lines(f for f in found if f.code == "CG202") == {("CG202", 14)}


def test_a_local_list_entry_written_between_replays_is_no_other_containers_entry(tmp_path):
    # Real loops keep flags in one-element lists (`numerics_failed[0] = ...` after replay);
    # a captured read of another container's `[0]` is not that entry. A named entry of a
    # config dict the model keeps (`cfg["scale"]`) still is.
    found = findings(
        tmp_path,
        {
            "loop.py": """
            import torch

            class Head:
                def __init__(self, cfg):
                    self.coefs = [1.0, 0.5]
                    self.cfg = cfg

                def forward(self, x):
                    if self.coefs[0] > 0.5:
                        x = x * 2
                    if self.cfg["scale"] > 1.0:
                        x = x * 3
                    return x

            def run(x, steps):
                cfg = {"scale": 1.0}
                head = Head(cfg)
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph):
                    y = head.forward(x)
                failed = [False]
                for step in range(steps):
                    cfg["scale"] = 1.0 + step
                    graph.replay()
                    failed[0] = bool(torch.isnan(y).any())
                return y
            """,
        },
    )
    assert codes_lines(f for f in found if f.code == "CG202") == {("CG202", 11)}


FLASH_ATTN_BLOCKS = {
    "mha.py": """
    import torch
    from torch.utils.checkpoint import checkpoint

    class MHA(torch.nn.Module):
        def __init__(self, dim, num_heads=1, use_flash_attn=False, checkpointing=False, device=None, dtype=None):
            super().__init__()
            self.wqkv = torch.nn.Linear(dim, 3 * dim, device=device, dtype=dtype)
            self.checkpointing = checkpointing

        def forward(self, x):
            qkv = self.wqkv(x)
            if not self.checkpointing:
                return qkv.sum(-1)
            return checkpoint(torch.sum, qkv, -1)
    """,
    "model.py": """
    from functools import partial
    import torch
    from mha import MHA

    def create_mixer_cls(config, process_group=None, device=None, dtype=None):
        factory_kwargs = {"device": device, "dtype": dtype}
        serial_kwargs = {"use_flash_attn": config.use_flash_attn} if process_group is None else {}
        return partial(MHA, num_heads=config.n_head, **serial_kwargs, **{EXTRA}factory_kwargs)

    class Block(torch.nn.Module):
        def __init__(self, dim, mixer_cls):
            super().__init__()
            self.mixer = mixer_cls(dim)

        def forward(self, x):
            return self.mixer(x)

    class Model(torch.nn.Module):
        def __init__(self, config):
            super().__init__()
            self.layers = torch.nn.ModuleList([Block(config.dim, create_mixer_cls(config)) for _ in range(config.n_layer)])

        def forward(self, x):
            for layer in self.layers:
                x = layer(x)
            return x
    """,
}


def test_a_flag_no_partial_binds_keeps_the_constructor_default(tmp_path):
    # flash-attn's gpt.py: the block's mixer is `partial(MHA, ..., **serial_kwargs,
    # **factory_kwargs)(dim)`; no construction passes `checkpointing`, so the checkpoint
    # branch under `if not self.checkpointing:` never runs in the captured decode step.
    files = {**FLASH_ATTN_BLOCKS, "model.py": FLASH_ATTN_BLOCKS["model.py"].replace("{EXTRA}", "")}
    assert findings(tmp_path, files, config={"captured": ["model.Model.forward"]}, select=["CG904"]) == []


def test_a_flag_an_unknown_mapping_may_bind_keeps_its_branch(tmp_path):
    # `**config.attn_kwargs` may pass `checkpointing=True`: the default decides nothing.
    files = {**FLASH_ATTN_BLOCKS, "model.py": FLASH_ATTN_BLOCKS["model.py"].replace("{EXTRA}", "config.attn_kwargs, **")}
    found = findings(tmp_path, files, config={"captured": ["model.Model.forward"]}, select=["CG904"])
    assert codes_lines(found) == {("CG904", 14)}


def test_a_constructor_given_unknown_keywords_keeps_the_branches_they_may_flip(tmp_path):
    # `MHA(dim, **mixer_kwargs)` with the mapping from the block's caller: `checkpointing`
    # may be among its keys, so its default does not prune the checkpoint branch.
    files = {
        "mha.py": FLASH_ATTN_BLOCKS["mha.py"],
        "model.py": """
        import torch
        from mha import MHA

        class Block(torch.nn.Module):
            def __init__(self, dim, mixer_kwargs):
                super().__init__()
                self.mixer = MHA(dim, **mixer_kwargs)

            def forward(self, x):
                return self.mixer(x)
        """,
    }
    found = findings(tmp_path, files, config={"captured": ["model.Block.forward"]}, select=["CG904"])
    assert codes_lines(found) == {("CG904", 14)}


def test_a_list_emptied_and_refilled_in_the_same_call_is_rebuilt_not_grown(tmp_path):
    # Transformer Engine's set_meta_tensor(): `self.quantizers[key] = []`, then `.extend(...)`
    # for each recipe state; done once at capture it leaves the list every call leaves. A
    # history appended to without being emptied grows on every eager call, and stops in replay.
    found = findings(
        tmp_path,
        {
            "quant.py": """
            import torch

            class Attention(torch.nn.Module):
                def __init__(self):
                    super().__init__()
                    self.proj = torch.nn.Linear(8, 8)
                    self.quantizers = {"scaling_fwd": [], "scaling_bwd": []}
                    self.amax_history = {"scaling_fwd": []}

                def set_meta_tensor(self, fwd, states):
                    key = "scaling_fwd" if fwd else "scaling_bwd"
                    self.quantizers[key] = []
                    for state in states:
                        self.quantizers[key].extend(state)
                    self.amax_history["scaling_fwd"].append(len(states))

                def forward(self, x):
                    self.set_meta_tensor(True, [[1.0], [2.0]])
                    return self.proj(x)
            """,
            "run.py": capture_script("from quant import Attention\nattn = Attention()", "y = attn(x)"),
        },
        select=["CG504"],
    )
    assert codes_lines(found) == {("CG504", 15)}


def test_rank_checks_on_a_torch_layers_bias_are_shape_not_data(tmp_path):
    # mamba-ssm's selective_state_update, given `dt_bias=self.dt_proj.bias` of an nn.Linear:
    # `dt_bias.dim() == 1` asks the rank; `.item()` on it beside still reads data.
    found = findings(
        tmp_path,
        {
            "mixer.py": """
            import torch
            from torch import nn

            def state_update(state, x, dt_bias=None):
                if dt_bias is not None and dt_bias.dim() == 1:
                    dt_bias = dt_bias.unsqueeze(0)
                if dt_bias.sum().item() > 0:
                    x = x * 2
                return state + x + dt_bias

            class Mixer(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.dt_proj = nn.Linear(4, 4, bias=True)

                def forward(self, state):
                    return state_update(state, state, dt_bias=self.dt_proj.bias)
            """,
            "run.py": capture_script("from mixer import Mixer\nmodel = Mixer().cuda()", "y = model(x)"),
        },
        select=["CG101", "CG201"],
    )
    assert codes_lines(found) == {("CG101", 7)}
