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
    import importlib.util

    import pytest

    spec = importlib.util.find_spec("torch")  # locates torch's sources without importing it
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("torch's sources are not installed")
    tree = Path(list(spec.submodule_search_locations)[0]) / "cuda"
    monkeypatch.chdir(tree)
    files, _ = discover([Path(".")], Config(root=tree).excludes, tree)
    fast = check_files(files, Config(root=tree))
    full = check_files(files, Config(root=tree), prefilter=False)
    assert len(files) > 20
    assert fast.findings == full.findings
