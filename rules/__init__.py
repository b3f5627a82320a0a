"""The rule catalogue: modules of Rule classes, by category (a category may span modules).

Shipped inside the wheel as `cglint.rules`. Every Rule subclass a module here defines is a
rule: there is no list to keep. The torch (and Python) symbols a rule matches are not written
in its module: they are entries of vocabulary.toml, each with its rule code and its source,
which the rules, the engine and the runtime verifier all read through `cglint.vocabulary`
(`vocabulary.names("sync.host_copies", "methods")`); tests/test_vocabulary.py fails on a rule
module that keeps a list of its own. Helpers the rules share live in modules without rules.
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
