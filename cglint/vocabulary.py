"""The vocabulary both halves of cglint read: every PyTorch and Python symbol that the static
checker (the engine and the rules) or the runtime verifier matches, from rules/vocabulary.toml.

Each entry of that file is one fact, keyed "section.entry", with the rule it reports (`code`),
the documentation or torch source that justifies it (`source`) and its symbols in named lists
(`functions`, `methods`, `ops`, ...; the file's header says what each holds). No rule module
and no verifier module keeps a list of torch names of its own: tests/test_vocabulary.py fails
on one. Where the halves match different names for the same fact, the difference is written in
the entry, as a `static_` or a `runtime_` list.

    names("sync.host_copies", "methods")   # what the checker matches: {"cpu", "numpy", "tolist"}
    entry("sync.unique").calls             # what the verifier's TorchFunctionMode sees
    object_tags()["torch.cuda.Stream"]     # "stream"

Neither torch nor libcst is imported here: the checker's pre-commit runs and the verifier's
supervising process read it too.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import cache, cached_property
from types import MappingProxyType
from typing import Any, Iterable, Mapping

FILE = "vocabulary.toml"
# The code of an entry that shapes what both halves think captured code is (regions, values,
# tracing), and so every rule.
ALL = "all"
_TEXTS = ("what", "file")  # optional strings of an entry
_FLAGS = ("wraps", "warms_up")  # optional booleans of an `objects.*` entry (the file says what they mean)
_HALVES = ("static_", "runtime_")


class VocabularyError(ValueError):
    """rules/vocabulary.toml breaks the shape this module reads (raised when it loads)."""


@dataclass(frozen=True)
class Entry:
    key: str  # "sync.host_copies"
    codes: tuple[str, ...]  # rule codes, or (ALL,)
    source: str
    lists: Mapping[str, frozenset[str]]
    what: str = ""  # how the verifier describes an operator of the entry
    file: str = ""  # sync.grad_scaler, sync.clip_grad_norm: the torch file of `library_functions`
    kinds: Mapping[str, str] = field(default_factory=dict)  # capture.kinds only
    flags: frozenset[str] = frozenset()

    @property
    def code(self) -> str:
        """The rule of an entry that names one."""
        if len(self.codes) != 1:
            raise VocabularyError(f"{self.key} names {len(self.codes)} codes, not one")
        return self.codes[0]

    def __getitem__(self, name: str) -> frozenset[str]:
        try:
            return self.lists[name]
        except KeyError:
            raise KeyError(f"{self.key} has no list {name!r} ({FILE})") from None

    def get(self, name: str) -> frozenset[str]:
        return self.lists.get(name, frozenset())

    def static(self, name: str = "names") -> frozenset[str]:
        """What the checker matches: list `name`, and its `static_` part."""
        return self._view(name, "static_")

    def runtime(self, name: str = "names") -> frozenset[str]:
        """What the verifier matches: list `name`, and its `runtime_` part."""
        return self._view(name, "runtime_")

    @cached_property
    def calls(self) -> frozenset[str]:
        """The names a TorchFunctionMode (or a wrapper of torch's callables) sees for the entry's
        methods, dunders and functions, with their `runtime_` parts: `func.__name__`, "nonzero"
        for torch.nonzero. Computed once: the verifier asks on every torch call."""
        functions = self.get("functions") | self.get("runtime_functions")
        return self.get("methods") | self.get("runtime_methods") | self.get("dunders") | self.get("runtime_dunders") \
            | short(functions)

    def _view(self, name: str, half: str) -> frozenset[str]:
        if name not in self.lists and half + name not in self.lists:
            raise KeyError(f"{self.key} has no list {name!r} ({FILE})")
        return self.get(name) | self.get(half + name)


@dataclass(frozen=True)
class CaptureError:
    text: str  # a substring of the exception's message; the first entry that matches wins
    code: str
    meaning: str
    source: str


def short(qualified: Iterable[str]) -> frozenset[str]:
    """The last part of each dotted name: "nonzero" for "torch.nonzero"."""
    return frozenset(name.rsplit(".", 1)[-1] for name in qualified)


# --- reading the file -----------------------------------------------------------------------------

def parse(data: Mapping[str, Any]) -> tuple[dict[str, Entry], tuple[CaptureError, ...]]:
    """Entries by key, and the capture errors in order; raises VocabularyError on a malformed entry."""
    found: dict[str, Entry] = {}
    for section, table in data.items():
        if section == "capture_errors":
            continue
        if not isinstance(table, dict) or not all(isinstance(e, dict) for e in table.values()):
            raise VocabularyError(f"[{section}] must hold entries ([{section}.<name>] tables)")
        for name, raw in table.items():
            key = f"{section}.{name}"
            found[key] = _entry(key, raw)
    errors = []
    for raw in data.get("capture_errors", ()):
        try:
            errors.append(CaptureError(**raw))
        except TypeError as exc:
            raise VocabularyError(f"[[capture_errors]] {raw.get('text')!r}: {exc}") from None
    _tags(found)
    return found, tuple(errors)


def _entry(key: str, raw: Mapping[str, Any]) -> Entry:
    def problem(text: str) -> VocabularyError:
        return VocabularyError(f"[{key}] in rules/{FILE}: {text}")

    code, source = raw.get("code"), raw.get("source")
    codes = (code,) if isinstance(code, str) else tuple(code) if isinstance(code, list) else ()
    if not codes or not all(isinstance(c, str) and c for c in codes):
        raise problem("`code` must be a rule code, a list of them, or \"all\"")
    if not isinstance(source, str) or not source.strip():
        raise problem("`source` must say where the entry's facts are documented or implemented")
    lists: dict[str, frozenset[str]] = {}
    texts: dict[str, str] = {}
    flags: set[str] = set()
    kinds: dict[str, str] = {}
    for name, value in raw.items():
        if name in ("code", "source"):
            continue
        if name in _TEXTS and isinstance(value, str):
            texts[name] = value
        elif name in _FLAGS and isinstance(value, bool):
            if value:
                flags.add(name)
        elif name == "kinds" and isinstance(value, dict) and all(isinstance(v, str) for v in value.values()):
            kinds = dict(value)
        elif isinstance(value, list) and value and all(isinstance(v, str) and v for v in value):
            if len(set(value)) != len(value):
                raise problem(f"`{name}` lists a name twice")
            lists[name] = frozenset(value)
        else:
            raise problem(f"`{name}` is neither a list of names nor one of {', '.join((*_TEXTS, *_FLAGS, 'kinds'))}")
    for name in lists:
        for half in _HALVES:
            if name.startswith(half) and lists[name] & lists.get(name[len(half):], frozenset()):
                raise problem(f"`{name}` repeats names of `{name[len(half):]}`")
    return Entry(key, codes, source, MappingProxyType(lists), kinds=MappingProxyType(kinds),
                 flags=frozenset(flags), **texts)


def _tags(found: Mapping[str, Entry]) -> dict[str, str]:
    """qualified name -> tag, from the `objects.<tag>` entries."""
    tags: dict[str, str] = {}
    for key, entry in found.items():
        section, _, tag = key.partition(".")
        if section != "objects":
            continue
        for name in entry["names"]:
            if name in tags:
                raise VocabularyError(f"rules/{FILE}: {name} is an object of two tags, {tags[name]} and {tag}")
            tags[name] = tag
    return tags


@cache
def _loaded() -> tuple[dict[str, Entry], tuple[CaptureError, ...]]:
    from cglint.datafiles import data_file
    from cglint.tomlread import toml

    return parse(toml.loads(data_file(FILE).read_text("utf-8")))


# --- asking it --------------------------------------------------------------------------------------

def entries() -> Mapping[str, Entry]:
    return _loaded()[0]


def entry(key: str) -> Entry:
    try:
        return _loaded()[0][key]
    except KeyError:
        raise KeyError(f"no entry {key!r} in rules/{FILE}") from None


@cache
def names(key: str, name: str = "names") -> frozenset[str]:
    """What the checker matches: list `name` of entry `key`, with its `static_` part."""
    return entry(key).static(name)


@cache
def runtime_names(key: str, name: str = "names") -> frozenset[str]:
    """What the verifier matches: list `name` of entry `key`, with its `runtime_` part."""
    return entry(key).runtime(name)


@cache
def object_tags() -> Mapping[str, str]:
    """Constructors (and getters) whose result is an object the rules care about -> its tag."""
    return MappingProxyType(_tags(_loaded()[0]))


@cache
def tags_with(flag: str) -> frozenset[str]:
    """The object tags whose entry sets `flag` ("wraps", "warms_up")."""
    if flag not in _FLAGS:
        raise KeyError(f"no object flag {flag!r} in rules/{FILE}")
    return frozenset(key.partition(".")[2] for key, e in entries().items() if key.startswith("objects.") and flag in e.flags)


def capture_kind(name: str) -> str:
    """How both halves name a capture form in a finding's region ("graph_block" -> "torch.cuda.graph")."""
    try:
        return entry("capture.kinds").kinds[name]
    except KeyError:
        raise KeyError(f"no capture kind {name!r} in rules/{FILE}") from None


def capture_errors() -> tuple[CaptureError, ...]:
    """Texts of exceptions raised during capture, and the rule each means (the verifier)."""
    return _loaded()[1]


def codes() -> frozenset[str]:
    """Every rule code the vocabulary names (the catalogue checks that it defines them)."""
    found = {code for e in entries().values() for code in e.codes if code != ALL}
    return frozenset(found | {error.code for error in capture_errors()})
