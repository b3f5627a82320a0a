"""Each fixture project is checked as users run it; the findings must be exactly the
lines marked `# expect: CGxxx` (a new false positive or a lost finding fails)."""
from __future__ import annotations

from pathlib import Path

import pytest

from cglint.api import check
from .helpers import expected_markers

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
PROJECTS = sorted(p.name for p in FIXTURES.iterdir() if p.is_dir())


def _expected(project: Path) -> set[tuple[str, str, int]]:
    found = set()
    for path in sorted(project.rglob("*.py")):
        for code, line in expected_markers(path.read_text("utf-8")):
            found.add((path.relative_to(FIXTURES).as_posix(), code, line))
    return found


@pytest.mark.parametrize("name", PROJECTS)
def test_fixture_findings_match_markers(name, monkeypatch):
    monkeypatch.chdir(FIXTURES)
    result = check([name])
    found = {(f.path, f.code, f.line) for f in result.findings}
    assert found == _expected(FIXTURES / name)


def test_clean_project_has_captures_but_no_markers():
    project = FIXTURES / "clean_project"
    assert not _expected(project)
    text = "".join(p.read_text("utf-8") for p in project.rglob("*.py"))
    for form in ("graph(", "capture_begin", "make_graphed_callables", "reduce-overhead", "contextmanager"):
        assert form in text


def test_every_fixture_finding_names_its_capture_and_the_trace_from_it(monkeypatch):
    # Every rule is about a capture: region code, the capture site, or code between replays.
    monkeypatch.chdir(FIXTURES)
    result = check(PROJECTS)
    assert result.findings
    for f in result.findings:
        assert f.region is not None and f.trace, f"{f.path}:{f.line} {f.code} has no capture"
        assert f.trace[0].startswith(f"{f.region.path}:{f.region.line} "), (f.code, f.trace)
        assert len(set(f.trace)) == len(f.trace), (f.code, f.trace)
    rebinding = next(f for f in result.findings if f.code == "CG401" and f.path.startswith("training_step/"))
    assert rebinding.trace == ("training_step/train.py:114 with torch.cuda.graph(graph)",)
