"""Where the data files shipped beside the rules lie (index.toml, vocabulary.toml, ...).

A module of its own so that the modules reading them (the rule base class, the vocabulary,
the verifier) do not import the catalogue, which imports them.
"""
from __future__ import annotations

from functools import cache
from importlib.util import find_spec
from pathlib import Path


@cache
def _rules_folder() -> Path:
    # Found, not imported: importing cglint.rules would import the rule base class, which reads these files.
    spec = find_spec("cglint.rules")
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError("the rule catalogue cglint.rules is not installed")
    return Path(next(iter(spec.submodule_search_locations)))


def data_file(name: str) -> Path:
    """A data file of rules/ (importlib.resources costs a pre-commit run 15 ms)."""
    return _rules_folder() / name
