"""Host values are told from tensor data: the tricky negatives a naive checker flags."""
from __future__ import annotations

import textwrap

from cglint.api import check_source

from .helpers import CORE


def found(source: str, select=CORE) -> set[tuple[str, int]]:
    text = textwrap.dedent(source).lstrip("\n")
    return {(f.code, f.line) for f in check_source(text, "snippet.py", select=select)}


def test_metadata_flags_and_device_ops_in_a_region_are_clean():
    source = """
    import torch
    import torch.nn.functional as F

    class Attention(torch.nn.Module):
        def __init__(self, dim, heads, use_bias=False, dropout=0.1):
            super().__init__()
            self.heads = heads
            self.use_bias = use_bias
            self.dropout = dropout
            self.layers = torch.nn.ModuleList([torch.nn.Linear(dim, dim) for _ in range(3)])
            self.scales = {"q": 1.0, "k": 1.0}

        def forward(self, x: torch.Tensor, mask=None, cache=None):
            if x.shape[0] > 4 and x.dim() == 3:
                x = x.reshape(-1, x.size(-1))
            if x.dtype == torch.half:
                x = x.float()
            if self.use_bias:
                x = x + 1
            if mask is None or isinstance(cache, dict):
                mask = torch.ones_like(x, dtype=torch.bool)
            for name, scale in self.scales.items():
                x = x * scale
            for i in range(len(self.layers)):
                x = self.layers[i](x)
            noise = torch.rand(x.shape, device="cuda")
            x = torch.where(mask, x, noise)
            x = F.dropout(x, self.dropout, training=self.training)
            buf = torch.empty_like(x)
            buf.copy_(x)
            buf.fill_(0.5)
            y = x.to(x.device).to(torch.float32)
            return buf + y[:, : x.shape[-1] // 2].sum()

    attn = Attention(64, 8)
    with torch.cuda.graph(g):
        out = attn(static_x)
    """
    assert found(source) == set()


def test_the_same_operations_on_tensor_data_are_flagged():
    source = """
    import torch

    class Gate(torch.nn.Module):
        def forward(self, x: torch.Tensor):
            if x.sum() > 0:
                x = x * 2
            scale = 2.0 if x.max() > 1 else 1.0
            assert torch.isfinite(x).all()
            keep = [v for v in range(4) if x[v].any()]
            total = bool(x.mean())
            return x[x > 0]

    gate = Gate()
    with torch.cuda.graph(g):
        out = gate(static_x)
    """
    assert found(source) == {
        ("CG201", 5),
        ("CG201", 7),
        ("CG201", 8),
        ("CG201", 9),
        ("CG101", 10),
        ("CG106", 11),
    }


def test_values_follow_rebinding_in_order():
    source = """
    import torch

    def step(x):
        n = x.shape[0]
        if n > 2:
            n = x.sum()
        x = x.cpu()
        if n > 2:
            pass
        return x

    with torch.cuda.graph(g):
        y = step(static_x)
    """
    assert found(source) == {("CG102", 7), ("CG201", 8)}


def test_call_site_arguments_decide_parameter_values():
    source = """
    import torch

    def scale(value, factor):
        if factor > 1:
            return value * factor
        return value

    with torch.cuda.graph(g):
        a = scale(static_x, 2)
        b = scale(static_x, static_x.max())
    """
    assert found(source) == {("CG201", 4)}


def test_host_tensors_and_copies_to_the_device():
    source = """
    import numpy as np
    import torch

    def positions(x, offsets):
        table = torch.tensor(offsets)
        idx = torch.from_numpy(np.arange(4)).cuda()
        noise = torch.randn(4).to("cuda")
        ok = torch.zeros(4, device="cuda").to(torch.float16)
        moved = x.to("cuda")
        return table.to(x.device), idx, noise, ok, moved

    with torch.cuda.graph(g):
        out = positions(static_x, [0, 1, 2, 3])
    """
    assert found(source) == {("CG402", 6), ("CG303", 7), ("CG402", 10)}


def test_host_state_changed_between_replays_freezes_branches():
    source = """
    import torch

    class Model(torch.nn.Module):
        def __init__(self, use_bias):
            super().__init__()
            self.use_bias = use_bias
            self.use_cache = True
            self.calls = 0

        def forward(self, x):
            self.calls += 1
            if self.use_bias:
                x = x + 1
            if self.use_cache:
                x = x * 2
            return x * 3 if self.calls > 10 else x

    model = Model(True)
    use_dropout = True
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        if use_dropout:
            y = model(static_x)

    for i in range(10):
        use_dropout = i % 2 == 0
        model.use_cache = i > 3
        g.replay()
    """
    # `self.calls > 10` (line 16) reads a counter only the captured forward steps: CG505 reports
    # it at `self.calls += 1`, where it stops counting; it is no change made between replays.
    assert found(source, select=["control-flow"]) == {("CG202", 14), ("CG202", 22)}
    assert ("CG505", 11) in found(source, select=["CG505"])


def test_ops_sized_by_data_only_where_the_size_depends_on_it():
    # Transformer Engine repeats its KV heads by a host int and then views the result: on an
    # H200 `k.repeat_interleave(2, dim=2)`, `torch.where(c, a, b)` and `a.where(c, b)` captured
    # and replayed like eager, while tensor repeats and one-argument `torch.where(c)` failed.
    source = """
    import torch

    def attend(q, k, v, keep, repeats):
        n_rep = q.shape[2] // k.shape[2]
        k = k.repeat_interleave(n_rep, dim=2)
        v = v.repeat_interleave(repeats=n_rep, dim=2)
        k = k.view(k.size(0), k.size(1) * k.size(2), -1)
        v = torch.where(keep, v, torch.zeros_like(v)).where(keep, 0.0)
        ragged = k.repeat_interleave(repeats, dim=1)
        rows = torch.where(keep)[0]
        return q @ k.transpose(-1, -2), v, ragged, rows

    q, k, v = (torch.randn(2, 16, 8, 64, device="cuda") for _ in range(3))
    keep = torch.rand(2, 16, 8, 64, device="cuda") > 0.1
    repeats = torch.ones(16, dtype=torch.long, device="cuda")
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out = attend(q, k, v, keep, repeats)
    """
    assert found(source, select=(*CORE, "dynamic-shape")) == {("CG108", 9), ("CG105", 10)}


def test_host_reads_of_host_tensors_and_inference_flags_are_no_device_data():
    # lmdeploy's token split: sizes held in a CPU tensor, sliced by its `.tolist()`; a rotary
    # cache asking `is_inference()`, a flag of the tensor object.
    source = """
    import torch

    class Gather(torch.nn.Module):
        def forward(self, x, sizes):
            host_sizes = torch.tensor(sizes)
            first = host_sizes.tolist()[0]
            head = x[:first]
            if x.is_inference():
                head = head.clone()
            return head, x[: x.sum().item()]

    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out = Gather()(static_x, [2, 2])
    """
    assert found(source, select=CORE + ("dynamic-shape",)) == {("CG101", 10), ("CG701", 10)}


def test_layers_unpacked_from_enumerate_and_zip_are_followed():
    source = """
    import torch
    from torch import nn

    class Block(nn.Module):
        def forward(self, x):
            return x.nonzero()

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = nn.ModuleList([Block() for _ in range(2)])

        def forward(self, x, caches):
            for i, (layer, cache) in enumerate(zip(self.layers, caches)):
                x = layer(x)
            return x

    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out = Net()(static_x, [None, None])
    """
    assert found(source) == {("CG105", 6)}


def test_an_isinstance_test_for_a_host_type_is_false_for_a_known_tensor():
    # Transformer Engine's checkpoint(function, *args): a backward-compatible branch takes its
    # flags from `args` only `if isinstance(args[0], bool)`; the captured call passes tensors,
    # so the flag stays False and the checkpointed block gets the tensors.
    source = """
    import torch

    class _Ckpt(torch.autograd.Function):
        @staticmethod
        def forward(ctx, run_function, distribute, *args):
            if distribute:
                args = args[1:]
            return run_function(*args)

    def checkpoint(function, *args, **kwargs):
        distribute = kwargs.pop("distribute", False)
        if len(args) > 3 and isinstance(args[0], bool) and callable(args[1]):
            distribute = args[0]
            args = args[3:]
        return _Ckpt.apply(function, distribute, *args)

    def block(x, y):
        return x + y.sum().item()

    x = torch.zeros(4, device="cuda")
    y = torch.zeros(4, device="cuda")
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out = checkpoint(block, x, y, x, y)
    """
    assert found(source) == {("CG101", 18)}


def test_a_flag_the_captured_forward_flips_still_freezes_its_branch():
    # `self.use_bias = not self.use_bias` in the forward alternates eagerly; replays repeat the
    # captured path. No counter for CG505 to report: the branch is where it shows.
    source = """
    import torch

    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.use_bias = True

        def forward(self, x):
            if self.use_bias:
                x = x + 1
            self.use_bias = not self.use_bias
            return x

    model = Model()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        y = model(static_x)
    for _ in range(4):
        g.replay()
    """
    assert found(source, select=["control-flow"]) == {("CG202", 9)}


def test_a_buffer_registered_from_a_cpu_factory_moves_with_its_module():
    # `torch.zeros(n)` has no device, but a registered buffer follows `.cuda()`: reading its
    # value on the host in captured code syncs. A plain attribute made the same way stays on
    # the CPU, and `.item()` of it reads host memory.
    source = """
    import torch

    class Cache(torch.nn.Module):
        def __init__(self, n):
            super().__init__()
            lengths = torch.zeros(n, dtype=torch.long)
            self.register_buffer("lengths", lengths, persistent=False)
            self.register_buffer("offsets", torch.zeros(n, dtype=torch.long))
            self.host_lengths = torch.zeros(n, dtype=torch.long)

        def forward(self, x):
            longest = self.lengths.max().item()
            first = int(self.offsets[0])
            known = self.host_lengths.max().item()
            return x[:, :8] * (longest + first + known)

    cache = Cache(4).cuda()
    with torch.cuda.graph(g):
        out = cache(static_x)
    """
    assert found(source, select=["CG101"]) == {("CG101", 12), ("CG101", 13)}
