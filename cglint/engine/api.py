"""The PyTorch symbol tables of rules/torch_api.toml, loaded once."""
from __future__ import annotations

from functools import cache
from types import SimpleNamespace

from cglint.tomlread import toml


def _freeze(table: dict) -> SimpleNamespace:
    return SimpleNamespace(
        **{key.replace("-", "_"): frozenset(v) if isinstance(v, list) else v for key, v in table.items()}
    )


@cache
def tables() -> SimpleNamespace:
    from cglint.datafiles import data_file

    data = toml.loads(data_file("torch_api.toml").read_text("utf-8"))
    fixed = {"objects": dict(data["objects"])}
    # Every other table (the engine's and the rules' symbol lists) is a namespace of frozensets.
    return SimpleNamespace(**fixed, **{name: _freeze(table) for name, table in data.items() if name not in fixed})
