"""setup (CG90x), autocast: captures inside an autocast whose weight-cast cache is on.

Autocast keeps the low-precision copy of each weight while its outermost block is
open; a graph captured inside reads those copies, which go stale or are freed.
"""
from __future__ import annotations

from typing import Optional

import libcst as cst

from cglint import vocabulary
from cglint.engine.captures import CaptureKind
from cglint.engine.syntax import code_of, is_false, keyword, positional
from cglint.rule import CAPTURE, Hit, Rule
from cglint.rules.warmup import manual_capture


def _caching_autocast(node: cst.CSTNode, function, ctx) -> Optional[cst.Call]:
    """The `torch.autocast(...)` around `node` whose weight-cast cache is on (no cache_enabled=False)."""
    for outer in ctx.enclosing(node, function):
        if not isinstance(outer, cst.With):
            continue
        for item in outer.items:
            call = item.item
            if isinstance(call, cst.Call) and ctx.call_name(call) in vocabulary.names("setup.autocast"):
                if is_false(keyword(call, "cache_enabled")) or is_false(keyword(call, "enabled")):
                    continue
                device = keyword(call, "device_type") or (positional(call)[0] if positional(call) else None)
                if device is not None and code_of(device).strip("'\"") == "cpu":
                    continue
                return call
    return None


def _autocast_fix(node: cst.CSTNode, ctx):
    """`cache_enabled=False` on the autocast named in the finding, around `node`. Autocast then
    casts the weights on every use instead of caching the casts: the same values, always fresh."""
    for outer in ctx.ancestors(node):
        for item in outer.items if isinstance(outer, cst.With) else ():
            call = item.item
            if isinstance(call, cst.Call) and code_of(call) == ctx.details.get("autocast"):
                return {call: ctx.with_keyword(call, "cache_enabled", cst.Name("False"))}
    return None


_AUTOCAST_FIX_SAFETY = "Safe: `--fix` adds `cache_enabled=False` to the autocast; the casts compute the same values, made afresh for every use."


class AutocastCacheAroundCapture(Rule):
    code = "CG903"
    name = "capture-inside-caching-autocast"
    category = "setup"
    severity = "warning"
    summary = "Captures a graph inside `torch.autocast(...)` without `cache_enabled=False`."
    message = "this capture runs inside `{autocast}`, whose cache keeps the low-precision weight copies made before capture; the graph reads those copies, which go stale when the weights change (and are freed when autocast exits)"
    fix_hint = "Pass `cache_enabled=False` to the autocast around the capture (and around its warmup)."
    why = """Autocast caches the fp16/bf16 copy of each weight for as long as the outermost
    autocast block is open. A capture inside that block does not cast the weights again:
    the graph reads the cached copies made during warmup. After an optimizer step the
    replays keep using the old weights, and when the autocast block exits the copies are
    freed while the graph still reads them. Results diverge from eager silently."""
    fix_safety = _AUTOCAST_FIX_SAFETY
    scope = CAPTURE
    nodes = (cst.With, cst.Call)
    invalid = (
        '''
import torch

with torch.autocast("cuda", dtype=torch.float16):
    for _ in range(3):
        static_y = model(static_x)
    with torch.cuda.graph(g):  # expect: CG903
        static_y = model(static_x)
''',
    )
    valid = (
        '''
import torch

with torch.autocast("cuda", dtype=torch.float16, cache_enabled=False):
    for _ in range(3):
        static_y = model(static_x)
    with torch.cuda.graph(g):
        static_y = model(static_x)
''',
    )
    fixed = (
        '''
import torch

with torch.autocast("cuda", dtype=torch.float16, cache_enabled=False):
    for _ in range(3):
        static_y = model(static_x)
    with torch.cuda.graph(g):
        static_y = model(static_x)
''',
    )

    def check(self, node, ctx):
        capture = ctx.capture
        if manual_capture(capture):
            autocast = _caching_autocast(node, ctx.function, ctx)
            if autocast is not None:
                yield Hit(node, {"autocast": code_of(autocast)})

    def fix(self, node, ctx):
        return _autocast_fix(node, ctx)


class AutocastCacheGraphedCallables(Rule):
    code = "CG910"
    name = "graphed-callables-inside-caching-autocast"
    category = "setup"
    severity = "error"
    summary = "Calls `make_graphed_callables` inside `torch.autocast(...)` without `cache_enabled=False`."
    message = "`{expr}` runs inside `{autocast}` with its cast cache on; make_graphed_callables refuses this (`make_graphed_callables does not support the autocast caching`)"
    fix_hint = "Pass `cache_enabled=False` to the autocast that surrounds graphing (and later replays)."
    why = """The forward and backward graphs of make_graphed_callables are captured separately;
    cached weight casts made while capturing the forward would be freed before the
    backward graph replays. PyTorch checks for an active autocast cache and raises."""
    fix_safety = _AUTOCAST_FIX_SAFETY
    scope = CAPTURE
    nodes = (cst.Call,)
    invalid = (
        '''
import torch

model = torch.nn.Linear(16, 16).cuda()
sample = torch.randn(8, 16, device="cuda")
with torch.autocast("cuda", dtype=torch.float16):
    graphed = torch.cuda.make_graphed_callables(model, (sample,))  # expect: CG910
''',
        '''
import torch

model = torch.nn.Linear(16, 16).cuda()
sample = torch.randn(8, 16, device="cuda")
with torch.autocast(
    "cuda",
    dtype=torch.bfloat16,
):
    graphed = torch.cuda.make_graphed_callables(model, (sample,))  # expect: CG910
''',
    )
    valid = (
        '''
import torch

model = torch.nn.Linear(16, 16).cuda()
sample = torch.randn(8, 16, device="cuda")
with torch.autocast("cuda", dtype=torch.float16, cache_enabled=False):
    graphed = torch.cuda.make_graphed_callables(model, (sample,))
''',
    )
    fixed = (
        '''
import torch

model = torch.nn.Linear(16, 16).cuda()
sample = torch.randn(8, 16, device="cuda")
with torch.autocast("cuda", dtype=torch.float16, cache_enabled=False):
    graphed = torch.cuda.make_graphed_callables(model, (sample,))
''',
        '''
import torch

model = torch.nn.Linear(16, 16).cuda()
sample = torch.randn(8, 16, device="cuda")
with torch.autocast(
    "cuda",
    dtype=torch.bfloat16,
    cache_enabled=False,
):
    graphed = torch.cuda.make_graphed_callables(model, (sample,))
''',
    )

    def check(self, node, ctx):
        capture = ctx.capture
        if capture is not None and capture.kind is CaptureKind.GRAPHED_CALLABLES:
            autocast = _caching_autocast(node, ctx.function, ctx)
            if autocast is not None:
                yield Hit(node, {"autocast": code_of(autocast)})

    def fix(self, node, ctx):
        return _autocast_fix(node, ctx)
