"""Which modules can run in the same program.

A folder of example or benchmark scripts holds many programs: `model.eval()` in one
script's main() changes nothing in another script's captured model, though both read
`self.training`. State keyed by attribute name alone (an object of unknown class) would
otherwise link them: checking a folder flagged a script that only a sibling script put in
eval mode after its capture.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Callable

if TYPE_CHECKING:
    from cglint.engine.definitions import ModuleInfo
    from cglint.engine.project import Project

_MAIN_GUARD = re.compile(r"""^if\s+(?:__name__\s*==\s*['"]__main__['"]|['"]__main__['"]\s*==\s*__name__)""", re.MULTILINE)


def has_main_guard(module: "ModuleInfo") -> bool:
    """`if __name__ == "__main__":` at its top level."""
    return not module.is_package and _MAIN_GUARD.search(module.file.text) is not None


def imported(project: "Project", module: "ModuleInfo") -> frozenset[str]:
    """The project modules `module` imports, directly or through other project modules."""

    def compute() -> frozenset[str]:
        seen, todo = {module.name}, [module]
        while todo:
            current = todo.pop()
            for target in list(current.imports.values()) + current.star_imports:
                found = project.module(target, near=current)
                if found is None and "." in target:  # `from pkg.mod import name`
                    found = project.module(target.rpartition(".")[0], near=current)
                if found is not None and found.name not in seen:
                    seen.add(found.name)
                    todo.append(found)
        return frozenset(seen)

    return project.cached(("imported", module.name), compute, frozenset())  # type: ignore[return-value]


def separate_programs(project: "Project", first: "ModuleInfo", second: "ModuleInfo", is_program: Callable[["ModuleInfo"], bool]) -> bool:
    """Two programs that never share a process: neither imports the other."""
    if first is second or first.name == second.name or not (is_program(first) and is_program(second)):
        return False
    return second.name not in imported(project, first) and first.name not in imported(project, second)
