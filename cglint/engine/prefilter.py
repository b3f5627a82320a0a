"""A byte-level test for files that can hold a capture, so the rest is never parsed."""
from __future__ import annotations

import re
from typing import Iterable

# Substrings present in every capture form the checker recognises, and in replay loops:
# torch.cuda.graph in any spelling (`th.cuda.graph`, `cuda.graph`, `from torch.cuda
# import graph`), CUDAGraph, make_graphed_callables, capture_begin, torch.compile's
# cudagraph modes and options. A superset: a false match only costs a parse. A bare
# "graph" is not enough of a hint: in torch and compiler code most files say "graph";
# nor is "cudagraph", which frameworks use in configuration names (`enable_cudagraph`).
CAPTURE_TOKENS = frozenset(
    {
        "cuda.graph",
        "torch.cuda import",
        "CUDAGraph",
        "make_graphed_callables",
        "capture_begin",
        "torch.cuda as",
        "reduce-overhead",
        "max-autotune",
        "cudagraphs",  # options={"triton.cudagraphs": True}, backend="cudagraphs"
        "cudagraph_trees",
        "replay(",
    }
)


def mentions(text: str, tokens: Iterable[str]) -> bool:
    return any(token in text for token in tokens if token)


def names_any(names: Iterable[str]) -> "re.Pattern[str]":
    """An expression for any of these identifiers as a whole word: a helper named `_record`
    is not mentioned by `_record_function` (substrings matched 25 times as many of torch's files)."""
    return re.compile(r"\b(?:%s)\b" % "|".join(re.escape(n) for n in sorted(names)))
