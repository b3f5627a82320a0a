"""Confirm on a GPU that the shapes of tests/data/divergence replay stale host state.

    python bench/divergence_confirm.py            # prints one JSON line per shape

Each shape captures a step, changes the host state the way its test program does (a setter
called in the replay loop, `eval()`, a flag set over `modules()`, a global set through
`global`, an advancing offset, new weights by `.data`), replays, and compares the replayed
output with the same step run eagerly now. `diverged` is what the static checker claims;
the clean shape (state in a device tensor refilled with `fill_()`) must match.
"""
from __future__ import annotations

import json

import torch
import torch.nn as nn

DEV = "cuda"


def _capture(step):
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = step()
    return graph, out


def _gap(graph, out, step) -> float:
    graph.replay()
    torch.cuda.synchronize()
    replayed = out.clone()
    return float((replayed - step()).abs().max())


class Decoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(16, 16)
        self.temperature, self.num_steps = 1.0, 4

    def configure(self, temperature, num_steps):
        self.temperature, self.num_steps = temperature, num_steps

    def forward(self, x):
        for _ in range(self.num_steps):
            x = torch.tanh(self.proj(x))
        return x / self.temperature


def sampler_setter():
    model, x = Decoder().to(DEV), torch.randn(2, 16, device=DEV)
    graph, out = _capture(lambda: model(x))
    model.configure(0.5, 2)
    return _gap(graph, out, lambda: model(x))


def train_eval():
    net, x = nn.Sequential(nn.Linear(32, 32), nn.Dropout(0.5)).to(DEV), torch.randn(8, 32, device=DEV)
    graph, out = _capture(lambda: net(x))
    net.eval()
    return _gap(graph, out, lambda: net(x))


class LoRA(nn.Module):
    def __init__(self):
        super().__init__()
        self.base, self.lora, self.enabled = nn.Linear(16, 16), nn.Linear(16, 16, bias=False), True

    def forward(self, x):
        return self.base(x) + self.lora(x) if self.enabled else self.base(x)


def adapter_flag():
    model, x = nn.Sequential(LoRA(), LoRA()).to(DEV), torch.randn(2, 16, device=DEV)
    graph, out = _capture(lambda: model(x))
    for module in model.modules():
        if isinstance(module, LoRA):
            module.enabled = False
    return _gap(graph, out, lambda: model(x))


GUIDANCE = 7.5


def _set_guidance(value):
    global GUIDANCE
    GUIDANCE = value


def global_setter():
    uncond, cond = torch.randn(4, 8, device=DEV), torch.randn(4, 8, device=DEV)
    step = lambda: uncond + GUIDANCE * (cond - uncond)  # noqa: E731
    graph, out = _capture(step)
    _set_guidance(3.0)
    return _gap(graph, out, step)


def kv_offset():
    cache, kv, state = torch.zeros(16, 8, device=DEV), torch.randn(1, 8, device=DEV), {"pos": 0}

    def write():
        cache[state["pos"] : state["pos"] + 1].copy_(kv)
        return cache

    graph, out = _capture(write)
    cache.zero_()
    state["pos"] = 5
    graph.replay()
    torch.cuda.synchronize()
    return float(1.0 - cache[5].eq(kv[0]).all().float())  # 1.0: row 5 was never written


def reloaded_weights():
    model, x = nn.Linear(16, 16).to(DEV), torch.randn(4, 16, device=DEV)
    graph, out = _capture(lambda: model(x))
    model.weight.data = torch.randn(16, 16, device=DEV)
    return _gap(graph, out, lambda: model(x))


class SamplingOptions:
    def __init__(self):
        self.penalty = 1.1
        self.opts = {"scale": 1.0}


def config_fields():
    options, logits = SamplingOptions(), torch.randn(4, 100, device=DEV)
    step = lambda: logits / options.penalty * options.opts["scale"]  # noqa: E731
    graph, out = _capture(step)
    options.penalty, options.opts["scale"] = 1.3, 0.5
    return _gap(graph, out, step)


def clean_device_scale():
    model, x = nn.Linear(16, 16).to(DEV), torch.randn(2, 16, device=DEV)
    scale = torch.ones((), device=DEV)
    step = lambda: model(x) * scale  # noqa: E731
    graph, out = _capture(step)
    scale.fill_(0.5)
    return _gap(graph, out, step)


SHAPES = {
    "sampler_setter": (sampler_setter, "diverged"),
    "train_eval": (train_eval, "diverged"),
    "adapter_flag": (adapter_flag, "diverged"),
    "global_setter": (global_setter, "diverged"),
    "kv_offset": (kv_offset, "diverged"),
    "reloaded_weights": (reloaded_weights, "diverged"),
    "config_fields": (config_fields, "diverged"),
    "clean_device_scale": (clean_device_scale, "matched"),
}


def main() -> int:
    torch.manual_seed(0)
    failures = 0
    with torch.no_grad():
        for name, (shape, claim) in SHAPES.items():
            gap = shape()
            observed = "diverged" if gap > 1e-4 else "matched"
            failures += observed != claim
            print(json.dumps({"shape": name, "gap": round(gap, 6), "observed": observed, "claim": claim, "agrees": observed == claim}))
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
