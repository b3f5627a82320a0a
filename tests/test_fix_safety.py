"""`cglint check --fix` never loses a user's code: a fix is written only if the result parses,
each file is replaced atomically (a run killed at any moment leaves every file old or new,
never partial), and the encoding, its byte-order mark, the line endings, the file mode and
symbolic links are kept."""
from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import libcst as cst
import pytest

from cglint.cli import main

# CG104: `torch.cuda.synchronize()` in a region is removed by its safe fix.
HAZARD = "import torch\ng = torch.cuda.CUDAGraph()\nwith torch.cuda.graph(g):\n    torch.cuda.synchronize()\n    y = 1\n"


def fix(*paths: Path) -> int:
    return main(["check", "--fix", "--no-cache", "--exit-zero", *map(str, paths)])


def test_fix_applies(tmp_path, capsys):
    path = tmp_path / "m.py"
    path.write_text(HAZARD)
    fix(path)
    assert "synchronize" not in path.read_text() and "y = 1" in path.read_text()


def test_encoding_bom_line_endings_and_mode_are_kept(tmp_path, capsys):
    latin = tmp_path / "latin.py"
    latin.write_bytes(b"# -*- coding: latin-1 -*-\r\nname = '\xe9'\r\n" + HAZARD.replace("\n", "\r\n").encode())
    latin.chmod(0o750)
    bom = tmp_path / "bom.py"
    bom.write_bytes(b"\xef\xbb\xbf# \xc3\xa9\n" + HAZARD.encode())
    fix(latin, bom)
    data = latin.read_bytes()
    assert b"synchronize" not in data
    assert b"name = '\xe9'" in data and data.startswith(b"# -*- coding: latin-1 -*-\r\n")
    assert b"\n" not in data.replace(b"\r\n", b"")  # every line still ends with CRLF
    assert latin.stat().st_mode & 0o777 == 0o750
    data = bom.read_bytes()
    assert data.startswith(b"\xef\xbb\xbf# \xc3\xa9\n") and b"synchronize" not in data


def test_symbolic_link_is_kept_and_its_target_fixed(tmp_path, capsys):
    target = tmp_path / "real.py"
    target.write_text(HAZARD)
    link = tmp_path / "link.py"
    link.symlink_to(target)
    fix(link)
    assert link.is_symlink() and "synchronize" not in target.read_text()


def test_a_fix_whose_result_does_not_parse_is_not_written(tmp_path, capsys, monkeypatch):
    from cglint import catalogue

    ExplicitSync = catalogue.by_code()["CG104"]

    calls = []

    def broken_fix(self, node, ctx):
        calls.append(node)
        name = cst.Name("x")
        object.__setattr__(name, "value", "not valid python!")  # libcst would refuse to build it
        return name

    monkeypatch.setattr(ExplicitSync, "fix", broken_fix)
    path = tmp_path / "m.py"
    path.write_text(HAZARD)
    fix(path)
    assert calls and path.read_text() == HAZARD


def test_file_changed_meanwhile_is_left_alone(tmp_path, capsys, monkeypatch):
    from cglint import fix as fixing

    path = tmp_path / "m.py"
    path.write_text(HAZARD)
    real = fixing.fix_paths

    def edit_during_fix(*args, **kwargs):
        outcome = real(*args, **kwargs)
        path.write_text(HAZARD + "z = 2\n")  # the user saves while cglint works
        return outcome

    monkeypatch.setattr(fixing, "fix_paths", edit_during_fix)
    fix(path)
    assert path.read_text() == HAZARD + "z = 2\n"
    assert "changed while cglint was working" in capsys.readouterr().err


# --- interrupted runs -------------------------------------------------------------------------

FILES = 16


def _tree(root: Path) -> dict[str, bytes]:
    root.mkdir(parents=True, exist_ok=True)
    padding = "".join(f"def helper_{i}(x):\n    return x + {i}\n\n" for i in range(80))  # larger writes
    originals = {}
    for i in range(FILES):
        data = (padding + HAZARD.replace("y = 1", f"y = {i}")).encode()
        (root / f"m{i:02d}.py").write_bytes(data)
        originals[f"m{i:02d}.py"] = data
    return originals


def _fixed(tmp_path: Path) -> dict[str, bytes]:
    reference = tmp_path / "reference"
    _tree(reference)
    subprocess.run([sys.executable, "-m", "cglint", "check", "--fix", "--no-cache", "."], cwd=reference, capture_output=True, timeout=120)
    fixed = {p.name: p.read_bytes() for p in reference.glob("*.py")}
    assert all(b"synchronize" not in data for data in fixed.values())
    return fixed


def _assert_each_file_old_or_new(root: Path, old: dict[str, bytes], new: dict[str, bytes]) -> tuple[int, int]:
    assert sorted(p.name for p in root.glob("*.py")) == sorted(old), "a file was lost or a stray .py appeared"
    counts = [0, 0]
    for name in old:
        data = (root / name).read_bytes()
        assert data in (old[name], new[name]), f"{name} is neither the old nor the fixed text ({len(data)} bytes)"
        counts[data == new[name]] += 1
    return counts[0], counts[1]


KILL_AT_FSYNC = """
import os, signal, sys
calls = 0
real = os.fsync
def fsync(fd):
    global calls
    calls += 1
    if calls == int(sys.argv[1]):
        os.kill(os.getpid(), signal.SIGKILL)  # the temporary file is written, not yet renamed
    real(fd)
os.fsync = fsync
from cglint.cli import main
sys.exit(main(["check", "--fix", "--no-cache", "."]))
"""


def test_run_killed_between_two_writes_leaves_every_file_old_or_new(tmp_path):
    new = _fixed(tmp_path)
    root = tmp_path / "work"
    old = _tree(root)
    done = subprocess.run([sys.executable, "-c", KILL_AT_FSYNC, "5"], cwd=root, capture_output=True, timeout=120)
    assert done.returncode == -signal.SIGKILL, done.stderr[-2000:]
    unchanged, fixed = _assert_each_file_old_or_new(root, old, new)
    assert fixed == 4 and unchanged == FILES - 4
    # What a killed write leaves behind is never taken for source code.
    assert all(not p.name.endswith(".py") for p in root.iterdir() if p.name.startswith("."))
    assert subprocess.run([sys.executable, "-m", "cglint", "check", "--no-cache", "."], cwd=root, capture_output=True).returncode == 1


@pytest.mark.parametrize("delay", [0.4, 1.2])
def test_run_killed_at_any_moment_leaves_every_file_old_or_new(tmp_path, delay):
    new = _fixed(tmp_path)
    root = tmp_path / "work"
    old = _tree(root)
    process = subprocess.Popen([sys.executable, "-m", "cglint", "check", "--fix", "--no-cache", "."], cwd=root,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(delay)
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=60)
    _assert_each_file_old_or_new(root, old, new)
    shutil.rmtree(root)
