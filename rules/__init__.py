"""The rule catalogue: one module per category, each exporting RULES.

Shipped inside the wheel as `cglint.rules`. Symbol tables the rules and the engine
share live in torch_api.toml.
"""
from __future__ import annotations

import importlib

# Category modules, in code order. A module missing here is not part of the catalogue.
_MODULES = ("sync", "control_flow", "cpu_rng", "realloc", "host_effect", "frozen_scalar",
            "dynamic_shape", "stream", "setup", "memory", "runtime")


def all_rule_classes() -> list:
    classes = []
    for name in _MODULES:
        try:
            module = importlib.import_module(f"{__name__}.{name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"{__name__}.{name}":
                raise
            continue
        classes.extend(module.RULES)
    return sorted(classes, key=lambda rule: rule.code)
