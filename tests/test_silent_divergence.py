"""Silent divergence (tests/data/divergence): host state a capture froze and the program
changes between replays, in the shapes real code has: a setter called in the replay loop,
`eval()` after capture, a flag flipped over `modules()`, a global set through `global` in
another module, an offset that advances, a loop bound set by a method. Every marked line is
reported and nothing else; the clean program keeps its state in a device tensor."""
from __future__ import annotations

from pathlib import Path

import pytest

from cglint.check import check_paths
from cglint.config import Config
from cglint.rule import expected_markers
from cglint.selection import Selection

from .helpers import by_file

CASES = Path(__file__).resolve().parent / "data" / "divergence"
SELECT = ["control-flow", "frozen-scalar", "dynamic-shape", "realloc"]


def _expected(root: Path) -> set:
    paths = [root] if root.is_file() else sorted(root.rglob("*.py"))
    base = CASES if root.is_file() else root
    return {(p.relative_to(base).as_posix(), code, line) for p in paths for code, line in expected_markers(p.read_text("utf-8"))}


@pytest.mark.parametrize("case", sorted(p.name for p in CASES.iterdir() if p.suffix == ".py" or p.is_dir()))
def test_divergence_is_located_at_its_line(case):
    root = CASES / case
    config = Config(root=root if root.is_dir() else CASES)
    found = check_paths([root], config, Selection.of(config, select=SELECT)).findings
    assert by_file(found, root if root.is_dir() else CASES) == _expected(root)
