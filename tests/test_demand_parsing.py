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
