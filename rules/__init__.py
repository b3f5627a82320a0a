"""The rule catalogue: modules of Rule classes, by category (a category may span modules).

Shipped inside the wheel as `cglint.rules`. Every Rule subclass a module here defines is a
rule: there is no list to keep. Symbol tables the rules and the engine share live in
torch_api.toml; helpers the rules share live in modules without rules.
"""
from __future__ import annotations

import importlib
import pkgutil

from cglint.rule import Rule, rules_defined_in


def all_rule_classes() -> list[type[Rule]]:
    """Every rule of every module of this package; a module that fails to import is an error."""
    classes: list[type[Rule]] = []
    for module in pkgutil.iter_modules(__path__):
        classes.extend(rules_defined_in(vars(importlib.import_module(f"{__name__}.{module.name}"))))
    return classes
