"""Parsing only what can matter gives exactly the findings of parsing everything."""
from __future__ import annotations

from pathlib import Path

from cglint.check import check_files
from cglint.config import Config
from cglint.discovery import discover

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"


def test_demand_driven_parsing_equals_parsing_every_file(monkeypatch):
    monkeypatch.chdir(FIXTURES)
    files, _ = discover([Path(".")], Config(root=FIXTURES).excludes, FIXTURES)
    fast = check_files(files, Config(root=FIXTURES))
    full = check_files(files, Config(root=FIXTURES), prefilter=False)
    assert fast.findings and fast.findings == full.findings


def test_demand_driven_parsing_equals_parsing_every_file_on_real_code(monkeypatch):
    tree = _torch_package("cuda")
    monkeypatch.chdir(tree)
    files, _ = discover([Path(".")], Config(root=tree).excludes, tree)
    fast = check_files(files, Config(root=tree))
    full = check_files(files, Config(root=tree), prefilter=False)
    assert len(files) > 20
    assert fast.findings == full.findings


def _torch_package(name: str) -> Path:
    import importlib.util

    import pytest

    spec = importlib.util.find_spec("torch")  # locates torch's sources without importing it
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("torch's sources are not installed")
    return Path(list(spec.submodule_search_locations)[0]) / name


def _functions(module):
    yield from module.functions.items()
    for cls in module.classes.values():
        for name, method in cls.methods.items():
            yield f"{cls.name}.{name}", method


def _lazy_modules_equal_whole_modules(paths: list[Path]) -> int:
    """Every function parsed alone from a skeleton has the code, decorators and signature of the
    same function in a whole parse; returns how many functions were compared."""
    import libcst as cst

    from cglint.engine.project import Project

    compared = 0
    for path in paths:
        lazy = Project(str, lambda *a: None).module_for_path(path)
        whole = Project(str, lambda *a: None, whole_modules=True).module_for_path(path)
        assert lazy is not None and whole is not None
        assert lazy.outline is not None, f"{path} was parsed whole: its skeleton did not parse or pair"
        assert sorted(lazy.imports.items()) == sorted(whole.imports.items())
        assert sorted(lazy.globals) == sorted(whole.globals)
        pairs = dict(_functions(whole))
        for name, function in _functions(lazy):
            other = pairs.pop(name)
            code = cst.Module([]).code_for_node
            # (comments after a body's last statement may end the body or not: the code may not)
            assert [code(s) for s in function.body] == [code(s) for s in other.body], (path, name)
            assert [code(d) for d in function.decorators] == [code(d) for d in other.decorators], (path, name)
            assert code(function.node.params) == code(other.node.params), (path, name)
            compared += 1
        assert not pairs
    return compared


def test_functions_parsed_alone_equal_a_whole_parse():
    assert _lazy_modules_equal_whole_modules(sorted(FIXTURES.rglob("*.py"))) > 50


def test_functions_parsed_alone_equal_a_whole_parse_on_real_code():
    paths = sorted(_torch_package("cuda").rglob("*.py")) + [_torch_package("_tensor.py"), _torch_package("nn/modules/module.py")]
    assert _lazy_modules_equal_whole_modules(paths) > 500
