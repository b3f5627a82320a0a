"""`cglint check --fix` / `--diff`: each safe fix gives exactly the expected text, fixing twice
changes nothing, the fixed file parses and no longer has the finding, and files keep their
encoding, BOM, line endings and permissions."""
from __future__ import annotations

import os
import shutil
import stat
import textwrap
from pathlib import Path

import libcst as cst
import pytest

from cglint import fix
from cglint.check import check_paths
from cglint.cli import main
from cglint.config import Config
from cglint.rules.sync import ExplicitSync

from .helpers import write_project

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"

CASES = {
    "rebind-in-replay-loop": (
        """
        import torch

        static_x = torch.zeros(8, 16, device="cuda")
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            static_y = model(static_x)

        for batch in loader:
            static_x = batch.cuda()  # new data
            g.replay()
        """,
        """
        import torch

        static_x = torch.zeros(8, 16, device="cuda")
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            static_y = model(static_x)

        for batch in loader:
            static_x.copy_(batch.cuda())  # new data
            g.replay()
        """,
    ),
    "rebind-attribute": (
        """
        import torch

        class Runner:
            def __init__(self, model, x):
                self.graph = torch.cuda.CUDAGraph()
                self.static_x = x.clone()
                with torch.cuda.graph(self.graph):
                    self.static_y = model(self.static_x)

            def __call__(self, x):
                self.static_x = x
                self.graph.replay()
                return self.static_y
        """,
        """
        import torch

        class Runner:
            def __init__(self, model, x):
                self.graph = torch.cuda.CUDAGraph()
                self.static_x = x.clone()
                with torch.cuda.graph(self.graph):
                    self.static_y = model(self.static_x)

            def __call__(self, x):
                self.static_x.copy_(x)
                self.graph.replay()
                return self.static_y
        """,
    ),
    "host-rng-to-device": (
        """
        import torch

        def add_noise(x):
            a = torch.randn(x.shape).cuda()
            b = torch.rand(4, 4, dtype=torch.half).to("cuda", non_blocking=True)
            c = torch.randint(0, 10, (8,)).to(x.device)
            return x + a + b + c

        with torch.cuda.graph(g):
            out = add_noise(static_x)
        """,
        """
        import torch

        def add_noise(x):
            a = torch.randn(x.shape, device="cuda")
            b = torch.rand(4, 4, dtype=torch.half, device="cuda")
            c = torch.randint(0, 10, (8,), device=x.device)
            return x + a + b + c

        with torch.cuda.graph(g):
            out = add_noise(static_x)
        """,
    ),
    "autocast-around-capture": (
        """
        import torch

        with torch.autocast("cuda", dtype=torch.float16):
            for _ in range(3):
                static_y = model(static_x)
            with torch.cuda.graph(g):
                static_y = model(static_x)
        """,
        """
        import torch

        with torch.autocast("cuda", dtype=torch.float16, cache_enabled=False):
            for _ in range(3):
                static_y = model(static_x)
            with torch.cuda.graph(g):
                static_y = model(static_x)
        """,
    ),
    "autocast-around-graphed-callables": (
        """
        import torch

        model = torch.nn.Linear(16, 16).cuda()
        sample = torch.randn(8, 16, device="cuda")
        with torch.autocast(
            "cuda",
            dtype=torch.bfloat16,
        ):
            graphed = torch.cuda.make_graphed_callables(model, (sample,))
        """,
        """
        import torch

        model = torch.nn.Linear(16, 16).cuda()
        sample = torch.randn(8, 16, device="cuda")
        with torch.autocast(
            "cuda",
            dtype=torch.bfloat16,
            cache_enabled=False,
        ):
            graphed = torch.cuda.make_graphed_callables(model, (sample,))
        """,
    ),
    "clip-grad-error-if-nonfinite": (
        """
        import torch

        with torch.cuda.graph(g):
            loss = model(static_x).sum()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0, error_if_nonfinite=True)
            torch.nn.utils.clip_grad_norm_(
                model.parameters(), max_norm=1.0, error_if_nonfinite=True
            )
            norm = torch.nn.utils.clip_grad_norm_(model.parameters(), error_if_nonfinite=True, max_norm=2.0)
        """,
        """
        import torch

        with torch.cuda.graph(g):
            loss = model(static_x).sum()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            torch.nn.utils.clip_grad_norm_(
                model.parameters(), max_norm=1.0
            )
            norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=2.0)
        """,
    ),
    "synchronize-removed": (
        """
        import torch

        def step(x):
            y = x * 2
            # make sure the kernels are done
            torch.cuda.synchronize()
            z = y + 1; torch.cuda.synchronize()
            if z.dim() > 1:
                torch.cuda.synchronize()
            return z

        done = torch.cuda.Event()
        with torch.cuda.graph(g):
            out = step(static_x)
            done.record()
            done.synchronize()
        """,
        """
        import torch

        def step(x):
            y = x * 2
            # make sure the kernels are done
            z = y + 1
            if z.dim() > 1:
                pass
            return z

        done = torch.cuda.Event()
        with torch.cuda.graph(g):
            out = step(static_x)
            done.record()
        """,
    ),
}


def _dedent(text: str) -> str:
    return textwrap.dedent(text).lstrip("\n")


def _fix(tmp_path: Path, text: str, name: str = "train.py"):
    write_project(tmp_path, {name: text})
    return fix.fix_paths([tmp_path / name], Config(root=tmp_path))


@pytest.mark.parametrize("case", sorted(CASES))
def test_fix_gives_exact_text_lints_clean_and_is_idempotent(tmp_path, case):
    before, after = map(_dedent, CASES[case])
    outcome = _fix(tmp_path, before)
    path = (tmp_path / "train.py").resolve()
    assert outcome.files[path].after == after
    assert outcome.files[path].before == before
    assert not outcome.write()
    assert (tmp_path / "train.py").read_text() == after
    # The fixed file parses, and no finding of a fixed rule is left.
    cst.parse_module(after)
    fixed_codes = {f.code for f in check_paths([tmp_path / "train.py"], Config(root=tmp_path)).findings} & {
        "CG104", "CG111", "CG303", "CG401", "CG903", "CG910"
    }
    assert fixed_codes == set()
    # Fixing again changes nothing.
    again = fix.fix_paths([tmp_path / "train.py"], Config(root=tmp_path))
    assert again.files == {} and again.fixed == 0


@pytest.mark.parametrize(
    "text, code",
    [
        # Not a plain rebinding of one name: left for the user.
        (
            "static_x = torch.zeros(8, device='cuda')\nwith torch.cuda.graph(g):\n    y = model(static_x)\n"
            "for a, b in loader:\n    static_x, other = a, b\n    g.replay()\n",
            "CG401",
        ),
        # A generator (or pinned memory) ties the draw to the host.
        ("def f(x, gen):\n    return x + torch.randn(4, generator=gen).cuda()\n\nwith torch.cuda.graph(g):\n    y = f(x, gen)\n", "CG303"),
        # The synchronize may order a non-blocking copy for the host.
        ("def f(x):\n    h = x.to('cpu', non_blocking=True)\n    torch.cuda.synchronize()\n    return h\n\nwith torch.cuda.graph(g):\n    y = f(x)\n", "CG104"),
        # query() is used for its value.
        ("s = torch.cuda.Stream()\nwith torch.cuda.graph(g):\n    y = x * 2\n    ready = s.query()\n", "CG104"),
    ],
)
def test_no_fix_where_it_would_not_be_safe(tmp_path, text, code):
    outcome = _fix(tmp_path, "import torch\n\n" + text)
    assert outcome.fixed == 0 and outcome.files == {}
    assert code in {f.code for f in outcome.result.findings}


def test_fixes_in_modules_reached_from_the_checked_file(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write_project(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/model.py": "import torch\n\ndef step(x):\n    torch.cuda.synchronize()\n    return x * 2\n",
            "pkg/run.py": "import torch\nfrom pkg.model import step\n\nwith torch.cuda.graph(g):\n    y = step(static_x)\n",
        },
    )
    assert main(["check", "--fix", "pkg/run.py"]) == 0
    assert (tmp_path / "pkg/model.py").read_text() == "import torch\n\ndef step(x):\n    return x * 2\n"


def test_a_fix_that_leaves_its_finding_or_breaks_the_file_is_not_written(tmp_path, monkeypatch):
    text = "import torch\n\nwith torch.cuda.graph(g):\n    y = x * 2\n    torch.cuda.synchronize()\n"
    monkeypatch.setattr(ExplicitSync, "fix", lambda self, node, ctx: node.with_changes(), raising=False)
    outcome = _fix(tmp_path, text)
    assert outcome.fixed == 0 and outcome.files == {}
    monkeypatch.setattr(ExplicitSync, "fix", lambda self, node, ctx: cst.Name("not valid"), raising=False)
    outcome = _fix(tmp_path, text)
    assert outcome.fixed == 0 and outcome.files == {}
    assert [f.code for f in outcome.result.findings] == ["CG104"]


SYNC = "import torch\n\nwith torch.cuda.graph(g):\n    y = x * 2\n    torch.cuda.synchronize()\n    z = 'd\u00e9j\u00e0 vu'\n"
SYNC_FIXED = "import torch\n\nwith torch.cuda.graph(g):\n    y = x * 2\n    z = 'd\u00e9j\u00e0 vu'\n"


@pytest.mark.parametrize(
    "encode, decode",
    [
        (lambda t: t.replace("\n", "\r\n").encode(), lambda t: t.replace("\n", "\r\n").encode()),  # CRLF
        (lambda t: b"\xef\xbb\xbf" + t.encode(), lambda t: b"\xef\xbb\xbf" + t.encode()),  # UTF-8 with BOM
        (
            lambda t: ("# -*- coding: latin-1 -*-\n" + t).encode("latin-1"),
            lambda t: ("# -*- coding: latin-1 -*-\n" + t).encode("latin-1"),
        ),
    ],
    ids=["crlf", "bom", "latin-1"],
)
def test_fix_keeps_encoding_line_endings_and_permissions(tmp_path, monkeypatch, capsys, encode, decode):
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "train.py"
    path.write_bytes(encode(SYNC))
    path.chmod(0o754)
    assert main(["check", "--fix", "train.py"]) == 0
    assert path.read_bytes() == decode(SYNC_FIXED)
    assert stat.S_IMODE(path.stat().st_mode) == 0o754
    assert [p.name for p in tmp_path.iterdir()] == ["train.py"]  # no temporary file left behind
    assert "Fixed 1 finding in 1 file." in capsys.readouterr().err


@pytest.mark.skipif(not hasattr(os, "symlink"), reason="no symbolic links")
def test_fix_through_a_symbolic_link_writes_the_target(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "real.py").write_text(SYNC)
    (tmp_path / "link.py").symlink_to(tmp_path / "real.py")
    assert main(["check", "--fix", "link.py"]) == 0
    assert (tmp_path / "link.py").is_symlink()
    assert (tmp_path / "real.py").read_text() == SYNC_FIXED


def test_diff_shows_the_fixes_without_writing(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text(SYNC)
    assert main(["check", "--diff", "train.py"]) == 1
    out, err = capsys.readouterr()
    assert out == (
        "--- a/train.py\n+++ b/train.py\n@@ -2,5 +2,4 @@\n \n with torch.cuda.graph(g):\n     y = x * 2\n"
        "-    torch.cuda.synchronize()\n     z = 'd\u00e9j\u00e0 vu'\n"
    )
    assert "Would fix 1 finding in 1 file." in err
    assert (tmp_path / "train.py").read_text() == SYNC
    (tmp_path / "train.py").write_text(SYNC_FIXED)
    assert main(["check", "--diff", "train.py"]) == 0
    assert capsys.readouterr().out == ""


def test_fix_then_report_what_is_left(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text(SYNC.replace("y = x * 2", "y = x.item()"))
    assert main(["check", "--fix", "--format", "concise", "train.py"]) == 1
    out, err = capsys.readouterr()
    assert out.splitlines()[0].startswith("train.py:4:9: CG101")
    assert "CG104" not in out and "Fixed 1 finding in 1 file." in err


def test_fixing_the_fixtures_leaves_nothing_fixable_and_is_idempotent(tmp_path, monkeypatch, capsys):
    shutil.copytree(FIXTURES, tmp_path / "fixtures")
    monkeypatch.chdir(tmp_path)
    before = {p: p.read_text() for p in sorted(tmp_path.rglob("*.py"))}
    main(["check", "--fix", "fixtures"])
    capsys.readouterr()
    after = {p: p.read_text() for p in before}
    changed = [p for p in before if before[p] != after[p]]
    assert changed, "the fixtures have fixable findings"
    for path in changed:
        cst.parse_module(after[path])
    assert "static_target.copy_(target)" in after[tmp_path / "fixtures/training_step/train.py"]
    result = check_paths([tmp_path / "fixtures"], Config(root=tmp_path))
    assert fix.fixable(result) == set()
    main(["check", "--fix", "fixtures"])
    assert "Nothing to fix." in capsys.readouterr().err
    assert {p: p.read_text() for p in before} == after
