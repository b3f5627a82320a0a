"""Which modules can run in the same program.

A folder of example or benchmark scripts holds many programs: `model.eval()` in one
script's main() changes nothing in another script's captured model, though both read
`self.training`. State keyed by attribute name alone (an object of unknown class) would
otherwise link them: checking a folder flagged a script that only a sibling script put in
eval mode after its capture.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Callable, Optional

if TYPE_CHECKING:
    from cglint.engine.definitions import ModuleInfo
    from cglint.engine.project import Project

_MAIN_GUARD = re.compile(r"""^if\s+(?:__name__\s*==\s*['"]__main__['"]|['"]__main__['"]\s*==\s*__name__)""", re.MULTILINE)


# Following a script's imports outlines every module it reaches: past this many (a script
# of a large package), the two are taken to share a program rather than outline the package.
_MAX_IMPORTED = 200


def has_main_guard(project: "Project", module: "ModuleInfo") -> bool:
    """`if __name__ == "__main__":` at its top level."""
    return project.cached(
        ("main guard", module.name), lambda: not module.is_package and _MAIN_GUARD.search(module.file.text) is not None, False
    )


def imported(project: "Project", module: "ModuleInfo") -> Optional[frozenset[str]]:
    """The project modules `module` imports, directly or through other project modules;
    None when they are too many to follow."""

    def compute() -> Optional[frozenset[str]]:
        seen, todo = {module.name}, [module]
        while todo:
            if len(seen) > _MAX_IMPORTED:
                return None
            current = todo.pop()
            for target in list(current.imports.values()) + current.star_imports:
                found = project.module(target, near=current)
                if found is None and "." in target:  # `from pkg.mod import name`
                    found = project.module(target.rpartition(".")[0], near=current)
                if found is not None and found.name not in seen:
                    seen.add(found.name)
                    todo.append(found)
        return frozenset(seen)

    return project.cached(("imported", module.name), compute, None)


def separate_programs(project: "Project", first: "ModuleInfo", second: "ModuleInfo", is_program: Callable[["ModuleInfo"], bool]) -> bool:
    """Two programs that never share a process: neither imports the other."""
    if first is second or first.name == second.name or not (is_program(first) and is_program(second)):
        return False
    reached = imported(project, first), imported(project, second)
    return None not in reached and second.name not in reached[0] and first.name not in reached[1]  # type: ignore[operator]
