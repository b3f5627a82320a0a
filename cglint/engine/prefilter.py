"""A byte-level test for files that can hold a capture, so the rest is never parsed."""
from __future__ import annotations

from typing import Iterable

# Substrings present in every capture form the checker recognises (torch.cuda.graph,
# CUDAGraph, make_graphed_callables, capture_begin, torch.compile modes and options)
# and in replay loops. A superset: false matches only cost a parse.
CAPTURE_TOKENS = frozenset({"graph", "Graph", "capture_begin", "reduce-overhead", "max-autotune", "cudagraph", "replay("})


def mentions(text: str, tokens: Iterable[str]) -> bool:
    return any(token in text for token in tokens if token)
