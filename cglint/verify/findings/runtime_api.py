"""The symbol tables of rules/runtime_api.toml: which torch calls, operators, library
functions, host calls and capture errors the verifier recognises, under which rule.

Each table is a field of a frozen dataclass, so a table missing from the file, or one the
code does not know, fails when the file loads, and so does a code the catalogue lacks.
"""
from __future__ import annotations

from dataclasses import dataclass, fields
from functools import cache
from typing import Any


@dataclass(frozen=True)
class Symbols:
    code: str
    names: frozenset[str]
    source: str
    what: str = ""  # how a finding describes it, where the code does not compose the text
    module: str = ""  # host.*_seeding: the module that defines the functions
    shown: str = ""  # host.*_seeding: how the module is named in messages


@dataclass(frozen=True)
class LibraryFunctions:
    code: str
    file: str  # the file name of the torch module that defines them
    functions: frozenset[str]
    what: str
    source: str


@dataclass(frozen=True)
class CaptureError:
    text: str  # a substring of the exception's message
    code: str
    meaning: str
    source: str


@dataclass(frozen=True)
class Calls:
    scalar_reads: Symbols
    host_copies: Symbols
    formatting: Symbols
    data_dependent_size: Symbols
    unique: Symbols
    resize: Symbols
    random_factories: Symbols
    inplace_random: Symbols
    from_host_data: Symbols


@dataclass(frozen=True)
class Ops:
    scalar_reads: Symbols
    data_dependent_size: Symbols
    unique: Symbols
    pin_memory: Symbols
    mask_indexing: Symbols


@dataclass(frozen=True)
class Library:
    clip_grad_norm: LibraryFunctions
    grad_scaler: LibraryFunctions


@dataclass(frozen=True)
class Host:
    timers: Symbols
    container_writes: Symbols
    path_io: Symbols
    torch_seeding: Symbols
    cuda_seeding: Symbols
    generator_state: Symbols


@dataclass(frozen=True)
class RuntimeApi:
    calls: Calls
    ops: Ops
    library: Library
    host: Host
    capture_errors: tuple[CaptureError, ...]

    def codes(self) -> set[str]:
        """Every rule code the tables name."""
        tables = [t for group in (self.calls, self.ops, self.library, self.host) for t in _values(group)]
        return {t.code for t in tables} | {e.code for e in self.capture_errors}


def _values(group: Any) -> list[Any]:
    return [getattr(group, f.name) for f in fields(group)]


def _symbols(entry: dict[str, Any]) -> Symbols:
    return Symbols(**{**entry, "names": frozenset(entry["names"])})


def _library(entry: dict[str, Any]) -> LibraryFunctions:
    return LibraryFunctions(**{**entry, "functions": frozenset(entry["functions"])})


def parse(data: dict[str, Any]) -> RuntimeApi:
    """Build the tables; raises TypeError on a missing or unknown table or key."""
    return RuntimeApi(
        calls=Calls(**{name: _symbols(e) for name, e in data["calls"].items()}),
        ops=Ops(**{name: _symbols(e) for name, e in data["ops"].items()}),
        library=Library(**{name: _library(e) for name, e in data["library"].items()}),
        host=Host(**{name: _symbols(e) for name, e in data["host"].items()}),
        capture_errors=tuple(CaptureError(**e) for e in data["capture_errors"]),
    )


@cache
def tables() -> RuntimeApi:
    from cglint.datafiles import data_file
    from cglint.tomlread import toml

    return checked(parse(toml.loads(data_file("runtime_api.toml").read_text("utf-8"))))


def checked(api: RuntimeApi) -> RuntimeApi:
    """`api`, once every code it names is known to be a rule of the catalogue."""
    from cglint.catalogue import index

    unknown = sorted(api.codes() - set(index()))
    if unknown:
        raise ValueError(f"rules/runtime_api.toml names codes the rule catalogue does not define: {unknown}")
    return api
