"""A byte-level test for files that can hold a capture, so the rest is never parsed."""
from __future__ import annotations

import ast
import re
from typing import Any, Iterable

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
        "get_device_module",  # `torch.get_device_module(device).graph(...)`: torch.cuda.graph on CUDA
        *(f"{quote}{word}{quote}" for word in _COMPILE_STRINGS for quote in "\"'"),
    }
)


# Tokens that count only as a whole word: torch.cuda.CUDAGraph is named `CUDAGraph`, and
# frameworks name their own things after it (vLLM's CUDAGraphMode in 70 files that capture
# nothing, torch's "CUDAGraphsC10Utils.h" in a 3,500-line table of strings).
_WHOLE_WORDS = {"CUDAGraph": re.compile(r"\bCUDAGraph\b")}

# One of these is in every token: most files hold none, and are done with after a few scans.
_ANCHORS = ("uda", "UDA", "replay(", "get_device_module", "capture_begin", "make_graphed_callables", "reduce-overhead", "max-autotune")


def can_capture(text: str) -> bool:
    """Whether `text` holds a capture token (see CAPTURE_TOKENS)."""
    if not any(anchor in text for anchor in _ANCHORS):
        return False
    for token in CAPTURE_TOKENS:
        if token in text:
            word = _WHOLE_WORDS.get(token)
            if word is None or word.search(text):
                return True
    return False


# What a module's code must name to hold a capture form the engine finds: the names of
# engine/checker.py's CAPTURE_NAMES (which functions discovery walks), as names, attributes
# or imports, or a compile mode, backend or option as a string. Files the byte scan picks
# for words in their docstrings, comments and string tables (torch's docs, its tracing
# rules, configuration modules) hold none and are not parsed up front.
_CODE_NAMES = frozenset(
    {"graph", "graphs", "CUDAGraph", "make_graphed_callables", "capture_begin", "capture_end", "replay", "compile", "optimize", "contextmanager",
     "get_device_module"}
)


def code_can_capture(tree: ast.Module) -> bool:
    """Whether a module's `ast` names a capture form in its code (not only in its strings)."""
    node: Any  # dispatched on its exact type, which mypy does not follow through `kind`
    for node in ast.walk(tree):
        kind = type(node)
        if kind is ast.Name:
            if node.id in _CODE_NAMES:
                return True
        elif kind is ast.Attribute:
            if node.attr in _CODE_NAMES:
                return True
        elif kind is ast.alias:
            if not _CODE_NAMES.isdisjoint(node.name.split(".")):
                return True
        elif kind is ast.ImportFrom:
            if node.module and not _CODE_NAMES.isdisjoint(node.module.split(".")):
                return True
        elif kind is ast.Constant:
            if type(node.value) is str and node.value in _COMPILE_STRINGS:
                return True
    return False


def mentions(text: str, tokens: Iterable[str]) -> bool:
    return any(token in text for token in tokens if token)


def names_word(text: str, names: Iterable[str]) -> bool:
    """Whether `text` holds any of these identifiers as a whole word: a helper named `_record`
    is not mentioned by `_record_function` (substrings matched 25 times as many of torch's files).
    A `find` loop per name: a `\\b(?:a|b)\\b` expression tried every position of every file and
    took twice as long over torch's sources."""
    for name in names:
        size, start = len(name), text.find(name) if name else -1
        while start != -1:
            end = start + size
            if not (start and _word_char(text[start - 1])) and not (end < len(text) and _word_char(text[end])):
                return True
            start = text.find(name, end)
    return False


def _word_char(char: str) -> bool:
    return char.isalnum() or char == "_"


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
        self.helpers = set(capture_functions)
        self.tokens = CAPTURE_TOKENS | self.helpers  # as the cache records them
        self.modules: set[str] = set()
        defined = set()
        for name in captured:
            parts = name.split(".")
            self.modules.update(".".join(parts[:-cut]) for cut in (1, 2) if len(parts) > cut)
            if len(parts) <= 2:  # a qualified name a module defines: "f" or "Class.method"
                defined.add(parts[0])
        self._defines = re.compile(r"\b(?:def|class)\s+(?:%s)\b" % "|".join(map(re.escape, sorted(defined)))) if defined else None

    def by_text(self, text: str) -> bool:
        return can_capture(text) or self.by_configuration(text)

    def by_configuration(self, text: str) -> bool:
        """A call of a configured capture helper, or a definition a `captured` entry names."""
        return mentions(text, self.helpers) or (self._defines is not None and self._defines.search(text) is not None)

    def by_module(self, module: str) -> bool:
        return module in self.modules
