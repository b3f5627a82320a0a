"""Test helpers: write a small project to a folder and check it, read the `# expect:` markers
of a sample program."""
from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Optional

from cglint.check import check_paths
from cglint.config import Config, from_table
from cglint.rule import EXPECT_MARKER
from cglint.selection import Selection


# The families the engine tests exercise; other rules (setup, memory...) have their own tests.
CORE = ("sync", "control-flow", "cpu-rng", "realloc")


def capture_script(imports: str, *calls: str) -> str:
    """A script that runs `calls` inside a `torch.cuda.graph` capture on a static input `x`."""
    body = "".join(f"    {call}\n" for call in calls)
    return (
        f"import torch\n{imports}\n\ng = torch.cuda.CUDAGraph()\n"
        f'x = torch.zeros(4, device="cuda")\nwith torch.cuda.graph(g):\n{body}'
    )


def write_project(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
    return root


def findings(root: Path, files: dict[str, str], config: Optional[dict] = None, paths: Optional[list[str]] = None, select=CORE):
    """Check a project made of `files` for the `select`ed rules."""
    write_project(root, files)
    cfg = from_table(config, root / "cglint.toml") if config else Config(root=root)
    targets = [root / p for p in paths] if paths else [root]
    return check_paths(targets, cfg, Selection.of(cfg, select)).findings


def codes_lines(results) -> set[tuple[str, int]]:
    return {(f.code, f.line) for f in results}


def by_file(results, root: Path) -> set[tuple[str, str, int]]:
    out = set()
    for f in results:
        path = Path(f.path)
        try:
            name = path.resolve().relative_to(root.resolve()).as_posix()
        except ValueError:
            name = f.path
        out.add((name, f.code, f.line))
    return out


def _functions(module):
    yield from module.functions.items()
    for cls in module.classes.values():
        for name, method in cls.methods.items():
            yield f"{cls.name}.{name}", method


def functions_parsed_alone_match(path: Path, text: Optional[str] = None, require_outline: bool = True) -> int:
    """Asserts that every function parsed alone from the module's skeleton has the code,
    decorators and signature of the same function in a whole parse (and the module the same
    imports and globals); returns how many functions were compared."""
    import libcst as cst

    from cglint.engine.project import Project

    lazy = Project(str, lambda *a: None).module_for_path(path, text)
    whole = Project(str, lambda *a: None, whole_modules=True).module_for_path(path, text)
    if whole is None or lazy is None:
        assert lazy is None and whole is None, path  # both fail to parse, or neither
        return 0
    assert lazy.outline is not None or not require_outline, f"{path} was parsed whole: its skeleton did not parse or pair"
    assert sorted(lazy.imports.items()) == sorted(whole.imports.items())
    assert sorted(lazy.globals) == sorted(whole.globals)
    pairs = dict(_functions(whole))
    generate = cst.Module([]).code_for_node

    def code(node) -> str:
        # Comment lines after a block's last statement belong to the block in a whole parse
        # and are cut with the function's lines: comments may differ, the code may not.
        return "\n".join(line for line in generate(node).splitlines() if line.strip() and not line.strip().startswith("#"))

    for name, function in _functions(lazy):
        other = pairs.pop(name)
        assert [code(s) for s in function.body] == [code(s) for s in other.body], (path, name)
        assert [code(d) for d in function.decorators] == [code(d) for d in other.decorators], (path, name)
        assert code(function.node.params) == code(other.node.params), (path, name)
    assert not pairs
    return len(dict(_functions(lazy)))


def expected_markers(source: str) -> set[tuple[str, int]]:
    """(code, line) pairs announced by `# expect: CG...` comments."""
    found = set()
    for lineno, line in enumerate(source.splitlines(), start=1):
        match = EXPECT_MARKER.search(line)
        if match:
            for code in match.group(1).split(","):
                found.add((code.strip(), lineno))
    return found
