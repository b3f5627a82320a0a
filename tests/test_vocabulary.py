"""One vocabulary for both halves: rules/vocabulary.toml, read through cglint.vocabulary.

The checker (engine and rules) and the verifier once kept the same facts in three places
(rule modules, rules/torch_api.toml, rules/runtime_api.toml), and a symbol added to one made
the halves disagree on the same code. Now every torch symbol is an entry of the vocabulary,
with its rule and its source, and no module of rules/ or cglint/verify/ may keep a list of
its own: the scan below fails on one (and is shown to fail on planted ones).
"""
from __future__ import annotations

import ast
from functools import cache
from pathlib import Path
from typing import Iterable, Iterator

import pytest

from cglint import catalogue, vocabulary
from cglint.engine.captures import CaptureKind
from cglint.rule import SEVERITIES

ROOT = Path(__file__).resolve().parent.parent
SCANNED = (ROOT / "rules", ROOT / "cglint" / "verify")


def known_symbols() -> frozenset[str]:
    """Every name the vocabulary lists, and the last part of each torch name (what the verifier's
    TorchFunctionMode sees: "nonzero" for torch.nonzero). cglint's own severity words are left
    out: they are a logger's method names too, and `("error", "warning")` lists no torch symbol."""
    listed = {name for entry in vocabulary.entries().values() for names in entry.lists.values() for name in names}
    listed |= vocabulary.short(name for name in listed if name.startswith("torch."))
    return frozenset(listed - set(SEVERITIES) - {""})  # "" ends prefixes: "torch.fft."


def symbol_lists(nodes: Iterable[ast.AST], known: frozenset[str]) -> Iterator[tuple[int, list[str]]]:
    """(line, strings) of each set, list or tuple display of strings alone, two or more of which
    are symbols of the vocabulary (`frozenset({"item", "cpu"})`, `in ("torch.unique", ...)`)."""
    for node in nodes:
        if isinstance(node, (ast.Set, ast.List, ast.Tuple)) and len(node.elts) >= 2:
            strings = [e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
            if len(strings) == len(node.elts) and sum(s in known for s in strings) >= 2:
                yield node.lineno, strings


@cache
def _nodes(path: Path) -> tuple[ast.AST, ...]:
    return tuple(ast.walk(ast.parse(path.read_text("utf-8"))))


def scan(folders: Iterable[Path]) -> list[str]:
    known = known_symbols()
    return [
        f"{path.relative_to(path.parents[1])}:{line}: {strings}"
        for folder in folders
        for path in sorted(folder.rglob("*.py"))
        for line, strings in symbol_lists(_nodes(path), known)
    ]


def test_no_rule_or_verifier_module_keeps_a_list_of_torch_symbols():
    found = scan(SCANNED)
    assert found == [], "symbol lists belong in rules/vocabulary.toml (read them with cglint.vocabulary):\n" + "\n".join(found)


PLANTED = '''
import libcst as cst
from cglint.rule import Rule

_SYNCS = frozenset({"item", "cpu", "tolist"})


class Planted(Rule):
    _FUNCTIONS = ("torch.nonzero", "torch.argwhere")

    def check(self, node, ctx):
        if ctx.call_name(node) in ["rand", "randn"]:
            yield node
        if node.severity in ("error", "warning") or ("attr", "item") or ("stream",) or ("gpu", "cpu"):
            yield node
'''


def test_the_scan_fails_on_planted_symbol_lists_and_passes_plain_strings(tmp_path):
    known = known_symbols()
    assert [line for line, _ in symbol_lists(ast.walk(ast.parse(PLANTED)), known)] == [5, 9, 12]
    planted = tmp_path / "rules" / "planted.py"
    planted.parent.mkdir()
    planted.write_text(PLANTED, "utf-8")
    assert [f.split(":")[1] for f in scan([planted.parent])] == ["5", "9", "12"]


def test_every_entry_names_a_rule_of_the_catalogue_and_a_source():
    defined = set(catalogue.index())
    for key, entry in vocabulary.entries().items():
        assert entry.source.strip(), key
        assert entry.codes == (vocabulary.ALL,) or set(entry.codes) <= defined, key
    for error in vocabulary.capture_errors():
        assert error.code in defined and error.source.strip(), error
    assert vocabulary.codes() <= defined


def _strings(paths: Iterable[Path]) -> set[str]:
    return {node.value for path in paths for node in _nodes(path) if isinstance(node, ast.Constant) and isinstance(node.value, str)}


def _code_files() -> list[Path]:
    return sorted([*(ROOT / "cglint").rglob("*.py"), *(ROOT / "rules").glob("*.py")])


def test_every_entry_is_read_and_every_entry_the_code_names_exists():
    # objects.* are read as a whole (vocabulary.object_tags), capture.kinds through capture_kind().
    read_whole = {key for key in vocabulary.entries() if key.startswith("objects.")} | {"capture.kinds"}
    strings = _strings(_code_files())
    assert [key for key in vocabulary.entries() if key not in strings and key not in read_whole] == []
    for path in _code_files():
        for node in _nodes(path):
            if not (isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant)):
                continue
            called = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            args = [a.value for a in node.args if isinstance(a, ast.Constant)]
            if called in ("names", "runtime_names", "entry") and "." in str(args[0]):
                entry = vocabulary.entry(args[0])  # raises for an entry the file lacks
                if called != "entry" and len(args) > 1:
                    view = entry.static if called == "names" else entry.runtime
                    assert view(args[1]), f"{path.name}: {args[0]} has no list {args[1]!r}"


def test_both_halves_read_the_shared_facts():
    checker = _strings([*(ROOT / "rules").glob("*.py"), *(ROOT / "cglint" / "engine").glob("*.py")])
    verifier = _strings((ROOT / "cglint" / "verify").rglob("*.py"))
    shared = {"sync.scalar_reads", "sync.host_copies", "sync.formatting", "sync.explicit", "sync.data_dependent_size",
              "sync.unique", "sync.repeat_interleave", "sync.pin_memory", "cpu_rng.seeding", "realloc.resize",
              "realloc.from_host_data", "host_effect.container_writes", "host_effect.file_io", "host_effect.timers",
              "memory.stores", "factories.uninitialized"}
    assert [key for key in sorted(shared) if key not in checker or key not in verifier] == []
    # The region kinds of both halves' findings: the checker's capture forms, and the verifier's API.
    kinds = set(vocabulary.entry("capture.kinds").kinds.values())
    assert {kind.value for kind in CaptureKind} == kinds - {vocabulary.capture_kind("function")}


def test_where_the_halves_differ_the_entry_says_so():
    seeding = vocabulary.entry("cpu_rng.seeding")
    assert "torch.cuda.manual_seed" in seeding.static("functions") & seeding.runtime("functions")
    assert "torch.get_rng_state" in seeding.runtime("functions") - seeding.static("functions")  # the CPU generator
    assert "torch.initial_seed" in seeding.static("functions") - seeding.runtime("functions")
    assert vocabulary.names("realloc.resize", "methods") == {"resize_", "resize_as_"}
    assert vocabulary.entry("realloc.resize").calls == {"resize_", "resize_as_", "set_"}
    # What a TorchFunctionMode sees: the last part of a function's name, methods and dunders.
    assert vocabulary.entry("sync.unique").calls == {"unique", "unique_consecutive", "_unique", "_unique2"}
    assert "where" not in vocabulary.entry("sync.data_dependent_size").calls  # only with one argument


def _parsed(extra: str) -> None:
    from cglint.tomlread import toml

    vocabulary.parse(toml.loads(extra))


@pytest.mark.parametrize("text, problem", [
    ('[sync.x]\ncode = "CG101"\nnames = ["item"]\n', "source"),
    ('[sync.x]\nsource = "s"\nnames = ["item"]\n', "code"),
    ('[sync.x]\ncode = "CG101"\nsource = "s"\nnames = ["item", "item"]\n', "twice"),
    ('[sync.x]\ncode = "CG101"\nsource = "s"\nnames = "item"\n', "neither a list"),
    ('[sync.x]\ncode = "CG101"\nsource = "s"\nnames = ["item"]\nstatic_names = ["item"]\n', "repeats"),
    ('[objects.a]\ncode = "all"\nsource = "s"\nnames = ["torch.X"]\n[objects.b]\ncode = "all"\nsource = "s"\nnames = ["torch.X"]\n', "two tags"),
])
def test_a_malformed_entry_is_an_error_when_the_file_loads(text, problem):
    with pytest.raises(vocabulary.VocabularyError, match=problem):
        _parsed(text)


def test_an_entry_or_list_the_file_lacks_is_an_error():
    with pytest.raises(KeyError, match="sync.misspelt"):
        vocabulary.names("sync.misspelt")
    with pytest.raises(KeyError, match="misspelt"):
        vocabulary.names("sync.host_copies", "misspelt")


def test_a_code_no_rule_defines_is_a_broken_catalogue(monkeypatch):
    monkeypatch.setattr(vocabulary, "codes", lambda: frozenset({"CG101", "CG998"}))
    with pytest.raises(catalogue.RuleContractError, match="CG998"):
        catalogue.check_contract(catalogue.rule_classes())
