"""A byte-level test for files that can hold a capture, so the rest is never parsed."""
from __future__ import annotations

import re
from typing import Iterable

# Substrings present in every capture form the checker recognises, and in replay loops:
# torch.cuda.graph in any spelling (`th.cuda.graph`, `cuda.graph`, `from torch.cuda
# import graph`), CUDAGraph, make_graphed_callables, capture_begin, torch.compile's
# cudagraph modes, backend and options. A superset: a false match only costs a parse. A bare
# "graph" is not enough of a hint: in torch and compiler code most files say "graph";
# nor is "cudagraph", which frameworks use in configuration names (`enable_cudagraph`).
# The compile forms are recognised only as string literals (`mode="reduce-overhead"`,
# `backend="cudagraphs"`, `options={"triton.cudagraphs": True}`), so only the quoted words
# count: torch's compiler says `config.triton.cudagraphs` in 60 files that capture nothing.
_COMPILE_STRINGS = ("reduce-overhead", "max-autotune", "cudagraphs", "triton.cudagraphs", "triton.cudagraph_trees")
CAPTURE_TOKENS = frozenset(
    {
        "cuda.graph",
        "torch.cuda import",
        "CUDAGraph",
        "make_graphed_callables",
        "capture_begin",
        "torch.cuda as",
        "replay(",
        *(f"{quote}{word}{quote}" for word in _COMPILE_STRINGS for quote in "\"'"),
    }
)


def mentions(text: str, tokens: Iterable[str]) -> bool:
    return any(token in text for token in tokens if token)


def names_any(names: Iterable[str]) -> "re.Pattern[str]":
    """An expression for any of these identifiers as a whole word: a helper named `_record`
    is not mentioned by `_record_function` (substrings matched 25 times as many of torch's files)."""
    return re.compile(r"\b(?:%s)\b" % "|".join(re.escape(n) for n in sorted(names)))


class EntryFiles:
    """Which files the engine parses up front: those that can hold a capture form or a call
    of a configured capture helper, and those that define a function named in `captured`.

    A `captured` entry is found by the module it names, never by its last name: `forward`
    is in most files of a model library (700 of diffusers' 1,100 files were parsed up
    front for five configured forwards), and so is a model's class name (430, its
    pipelines). The engine resolves `pkg.mod.Model.forward` through `pkg.mod`, and a name
    relative to a module (`Model.forward`, `decode_step`, `mod.Model.forward`) by the
    qualified names a module defines: the files entered are that module and those that
    define the entry's first name (`class Model`, `def decode_step`)."""

    def __init__(self, capture_functions: Iterable[str], captured: Iterable[str]):
        self.tokens = CAPTURE_TOKENS | set(capture_functions)
        self.modules: set[str] = set()
        defined = set()
        for name in captured:
            parts = name.split(".")
            self.modules.update(".".join(parts[:-cut]) for cut in (1, 2) if len(parts) > cut)
            if len(parts) <= 2:  # a qualified name a module defines: "f" or "Class.method"
                defined.add(parts[0])
        self._defines = re.compile(r"\b(?:def|class)\s+(?:%s)\b" % "|".join(map(re.escape, sorted(defined)))) if defined else None

    def by_text(self, text: str) -> bool:
        return mentions(text, self.tokens) or (self._defines is not None and self._defines.search(text) is not None)

    def by_module(self, module: str) -> bool:
        return module in self.modules
