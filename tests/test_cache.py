"""The result cache answers unchanged runs and misses whenever any file it read changed."""
from __future__ import annotations

import json
import os

import pytest

from cglint.cli import main

from .helpers import write_project

RUN = """
import torch
from model import forward

with torch.cuda.graph(g):
    y = forward(static_x)
"""


def check_json(args, capsys) -> list:
    main(["check", "--format", "json", "--exit-zero", *args])
    return json.loads(capsys.readouterr().out)["findings"]


@pytest.fixture
def project(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write_project(tmp_path, {"run.py": RUN, "model.py": "def forward(x):\n    return x.cpu()\n"})
    return tmp_path


def test_warm_run_gives_the_same_findings_from_the_cache(project, capsys):
    cold = check_json(["run.py"], capsys)
    entries = sorted(p.name.startswith("base-") for p in (project / ".cglint_cache").glob("*.json"))
    assert entries == [False, True] and cold[0]["code"] == "CG102"  # the run, and its footprint
    assert check_json(["run.py"], capsys) == cold
    assert check_json(["--no-cache", "run.py"], capsys) == cold


def test_editing_a_callee_outside_the_checked_files_invalidates(project, capsys):
    assert [f["code"] for f in check_json(["run.py"], capsys)] == ["CG102"]
    (project / "model.py").write_text("def forward(x):\n    return x.nonzero()\n")
    assert [f["code"] for f in check_json(["run.py"], capsys)] == ["CG105"]
    (project / "model.py").write_text("def forward(x):\n    return x * 2\n")
    assert check_json(["run.py"], capsys) == []


def test_options_are_part_of_the_key(project, capsys):
    assert [f["code"] for f in check_json(["run.py"], capsys)] == ["CG102"]
    assert check_json(["--ignore", "CG102", "run.py"], capsys) == []


def test_corrupt_or_read_only_cache_is_ignored(project, capsys):
    cold = check_json(["run.py"], capsys)
    for entry in (project / ".cglint_cache").glob("*.json"):
        entry.write_text("{not json")
    assert check_json(["run.py"], capsys) == cold
    folder = project / ".cglint_cache"
    os.chmod(folder, 0o500)
    try:
        (project / "model.py").write_text("def forward(x):\n    return x.tolist()\n")
        assert [f["code"] for f in check_json(["run.py"], capsys)] == ["CG102"]
    finally:
        os.chmod(folder, 0o700)


# --- a changed file the engine never read: its findings are reused, not recomputed --------

HELPER = """
import torch

g = torch.cuda.CUDAGraph()

def capture(fn, x):
    with torch.cuda.graph(g):
        fn(x)
"""


@pytest.fixture
def tree(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write_project(tmp_path, {
        "run.py": RUN,
        "model.py": "def forward(x):\n    return x.cpu()\n",
        "helpers.py": HELPER,
        "data.py": "def load(path):\n    return open(path).read()\n",
    })
    return tmp_path


def _engine_must_not_run(monkeypatch):
    import cglint.check

    def refuse(*args):
        raise AssertionError("the engine ran: the previous findings should have been reused")

    monkeypatch.setattr(cglint.check, "_run_engine", refuse)


def test_editing_a_file_nothing_reads_reuses_the_engines_findings(tree, capsys, monkeypatch):
    cold = check_json(["."], capsys)
    assert [f["code"] for f in cold] == ["CG102"]
    (tree / "data.py").write_text("def load(path):\n    with open(path) as f:\n        return f.read()\n")
    _engine_must_not_run(monkeypatch)
    assert check_json(["."], capsys) == cold
    # A syntax error in a file that no capture reaches and that holds no capture form is
    # not reported, with the cache or without (README, "Syntax errors").
    (tree / "data.py").write_text("def load(path:\n")
    assert [f["code"] for f in check_json(["."], capsys)] == ["CG102"]
    monkeypatch.undo()
    monkeypatch.chdir(tree)
    assert check_json(["--no-cache", "."], capsys) == check_json(["."], capsys)
    # Once it names a capture form, the engine reads it, and reports its syntax error.
    (tree / "data.py").write_text("import torch\ng = torch.cuda.CUDAGraph()\ndef load(path:\n")
    assert [f["code"] for f in check_json(["."], capsys)] == ["CG002", "CG102"]


def test_a_changed_file_that_now_calls_a_capture_helper_is_checked_again(tree, capsys):
    assert [f["code"] for f in check_json(["."], capsys)] == ["CG102"]
    (tree / "data.py").write_text("from helpers import capture\n\ndef step(x):\n    return x.item()\n\ncapture(step, 1)\n")
    assert [f["code"] for f in check_json(["."], capsys)] == ["CG101", "CG102"]


def test_a_changed_file_that_now_captures_is_checked_again(tree, capsys):
    assert [f["code"] for f in check_json(["."], capsys)] == ["CG102"]
    (tree / "data.py").write_text("import torch\n\nwith torch.cuda.graph(g):\n    y = x.tolist()\n")
    assert [(f["path"], f["code"]) for f in check_json(["."], capsys)] == [("data.py", "CG102"), ("model.py", "CG102")]


def test_creating_a_module_a_checked_file_imports_invalidates(tmp_path, monkeypatch, capsys):
    """`run.py` imports `model`, which does not exist yet: creating it must not be answered
    from the cache, though `run.py` itself did not change."""
    monkeypatch.chdir(tmp_path)
    write_project(tmp_path, {"run.py": RUN})
    assert check_json(["run.py"], capsys) == []
    (tmp_path / "model.py").write_text("def forward(x):\n    return x.cpu()\n")
    assert [f["code"] for f in check_json(["run.py"], capsys)] == ["CG102"]
    (tmp_path / "model.py").unlink()
    (tmp_path / "model").mkdir()  # a folder of that name is not a module yet...
    assert check_json(["run.py"], capsys) == []
    (tmp_path / "model" / "__init__.py").write_text("def forward(x):\n    return x.nonzero()\n")  # ...a package is
    assert [f["code"] for f in check_json(["run.py"], capsys)] == ["CG105"]


def test_a_footprint_reads_back_as_it_was_stored(tree, capsys):
    from cglint.check import check_paths
    from cglint.config import Config
    from cglint.footprint import Footprint

    footprint = check_paths([tree], Config(root=tree)).footprint
    stored = json.loads(json.dumps(footprint.to_json()))
    again = Footprint.from_json(stored)
    assert again.engine == footprint.engine and [f.code for f in again.engine] == ["CG102"]
    assert again.engine[0].region is not None and again.engine[0].trace == footprint.engine[0].trace
    assert again.read == {str(tree / name) for name in ("run.py", "model.py", "helpers.py")}  # not data.py
    assert again.absent == footprint.absent and again.to_json() == stored


def test_a_recorded_digest_is_used_while_the_file_is_unchanged_and_never_after_an_edit(tmp_path, monkeypatch):
    from cglint import cache

    module, folder = tmp_path / "m.py", tmp_path / ".cglint_cache"
    module.write_text("x = 1\n")
    monkeypatch.setattr(cache, "_RACY_NS", 0)  # trust what was written before the recording
    first = cache.file_digests(folder, [module])
    with monkeypatch.context() as patched:
        patched.setattr(cache, "file_digest", lambda path: pytest.fail("an unchanged file was read again"))
        assert cache.file_digests(folder, [module]) == first
    # The same size, the old modification time put back: the change time still tells.
    before = os.stat(module)
    module.write_text("x = 2\n")
    os.utime(module, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert cache.file_digests(folder, [module]) == {str(module): cache.digest(b"x = 2\n")} != first


def test_a_digest_recorded_just_after_an_edit_is_not_trusted(tmp_path, monkeypatch):
    from cglint import cache

    module, folder = tmp_path / "m.py", tmp_path / ".cglint_cache"
    module.write_text("x = 1\n")
    cache.file_digests(folder, [module])
    # Within the same tick of a coarse clock, an edit could keep every time: read it again.
    read = []
    monkeypatch.setattr(cache, "file_digest", lambda path: read.append(path) or "d")
    cache.file_digests(folder, [module])
    assert read == [module]
