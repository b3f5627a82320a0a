"""`cglint verify --save-reach FILE`: the project functions that really ran during each capture,
in the shape of `cglint reach --format json`, written however the script ends."""
from __future__ import annotations

import json
import os
import sys
import textwrap

import pytest

torch = pytest.importorskip("torch")

from cglint.verify.run import cli, events, reach  # noqa: E402
from cglint.verify.capture.instrument import Instrumentation  # noqa: E402
from cglint.verify.findings.recorder import Recorder  # noqa: E402
from cglint.findings import Region  # noqa: E402

# A small package: a function in another module, a method reached through an attribute, an
# nn.Module's forward through __call__, a function through a decorator and a forward hook.
PACKAGE = {
    "pkg/__init__.py": "",
    "pkg/ops.py": """
        import functools


        def scale(x):
            return x * 2


        def traced(fn):
            @functools.wraps(fn)
            def wrapper(*args, **kwargs):
                return fn(*args, **kwargs)
            return wrapper


        @traced
        def decorated(x):
            return x + 1


        class Helper:
            def __init__(self, k):
                self.k = k

            def apply(self, x):
                return scale(x) * self.k


        def setup_only(x):
            return x - 1


        def on_forward(module, inputs, output):
            return output * 1


        def second_pass(x):
            return x * 3


        def raw_step(x):
            return x.sin()
    """,
    "pkg/model.py": """
        from torch import nn

        from pkg import ops


        class Block(nn.Module):
            def __init__(self):
                super().__init__()
                self.lin = nn.Linear(4, 4)
                self.helper = ops.Helper(3)

            def forward(self, x):
                y = self.lin(x)
                return self.helper.apply(y)


        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.blocks = nn.ModuleList([Block() for _ in range(2)])
                self.blocks[0].register_forward_hook(ops.on_forward)

            def forward(self, x):
                for block in self.blocks:
                    x = block(x)
                return ops.decorated(x)
    """,
    "run.py": """
        import torch

        from pkg import ops
        from pkg.model import Block, Net

        net = Net().cuda()
        x = torch.randn(2, 4, device="cuda")
        ops.setup_only(x)
        with torch.no_grad():
            net(x)
            graphs = [torch.cuda.CUDAGraph() for _ in range(2)]
            for i in range(2):
                with torch.cuda.graph(graphs[i]):
                    out = net(x) if i == 0 else ops.second_pass(x)
                    print("captured")
            raw, side = torch.cuda.CUDAGraph(), torch.cuda.Stream()
            with torch.cuda.stream(side):
                raw.capture_begin()
                y = ops.raw_step(x)
                raw.capture_end()
        graphed = torch.cuda.make_graphed_callables(Block().cuda(), (torch.randn(2, 4, device="cuda"),))
        graphs[0].replay()
        ops.setup_only(x)
    """,
}
GRAPH_LINE, RAW_LINE, GRAPHED_LINE = 13, 18, 21


def write(root, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).lstrip("\n"))


def verify(folder, monkeypatch, capsys, *argv: str, script: str = "run.py"):
    monkeypatch.chdir(folder)
    code = cli.main(["--format", "json", *argv, script])
    out, err = capsys.readouterr()
    return code, json.loads(out), err


def reached(saved: dict, line: int) -> dict[str, dict]:
    """qualname -> entry of the capture at `line`."""
    entry = next(c for c in saved["captures"] if c["line"] == line)
    return {r["qualname"]: r for r in entry["reached"]}


def test_every_kind_of_call_in_a_capture_is_saved_with_its_qualname(tmp_path, monkeypatch, capsys):
    write(tmp_path, PACKAGE)
    (tmp_path / "out").mkdir()
    code, report, err = verify(tmp_path, monkeypatch, capsys, "--save-reach", "out/reach.json")
    assert not code or report["findings"]  # the file does not depend on the verdict
    saved = json.loads((tmp_path / "out" / "reach.json").read_text())
    assert set(saved) == {"version", "captures"}
    # One entry per capture site, as the report's captures name them (the loop's two captures are one).
    sites = [(c["path"], c["line"], c["kind"]) for c in saved["captures"]]
    assert sites == [("run.py", GRAPH_LINE, "torch.cuda.graph"), ("run.py", RAW_LINE, "capture_begin"),
                     ("run.py", GRAPHED_LINE, "make_graphed_callables")]
    assert {(c["path"], c["line"], c["kind"]) for c in report["captures"]} == set(sites)
    assert all(c["unresolved"] == [] for c in saved["captures"])

    graph = reached(saved, GRAPH_LINE)
    # The union of the site's two captures: the model in the first, second_pass in the second.
    assert set(graph) == {"Net.forward", "Block.forward", "Helper.apply", "scale", "traced.<locals>.wrapper",
                          "decorated", "on_forward", "second_pass"}
    assert {name: (r["path"], r["line"]) for name, r in graph.items()} == {
        "Net.forward": ("pkg/model.py", 23), "Block.forward": ("pkg/model.py", 12),
        "Helper.apply": ("pkg/ops.py", 24), "scale": ("pkg/ops.py", 4),
        "traced.<locals>.wrapper": ("pkg/ops.py", 9), "decorated": ("pkg/ops.py", 15),  # its first decorator
        "on_forward": ("pkg/ops.py", 32), "second_pass": ("pkg/ops.py", 36),
    }
    # Sorted by path and line; `via` is the chain of project frames from the capture.
    entries = next(c for c in saved["captures"] if c["line"] == GRAPH_LINE)["reached"]
    assert [(r["path"], r["line"]) for r in entries] == sorted((r["path"], r["line"]) for r in entries)
    assert graph["Net.forward"]["via"] == [f"run.py:{GRAPH_LINE + 1} <module>"]
    assert graph["Block.forward"]["via"] == [f"run.py:{GRAPH_LINE + 1} <module>", "pkg/model.py:25 Net.forward"]
    assert graph["on_forward"]["via"] == graph["Block.forward"]["via"]  # hooks run from Module.__call__
    assert graph["decorated"]["via"] == [f"run.py:{GRAPH_LINE + 1} <module>", "pkg/model.py:26 Net.forward",
                                         "pkg/ops.py:11 traced.<locals>.wrapper"]
    assert graph["scale"]["via"][-1] == "pkg/ops.py:25 Helper.apply"
    assert graph["second_pass"]["via"] == [f"run.py:{GRAPH_LINE + 1} <module>"]

    assert set(reached(saved, RAW_LINE)) == {"raw_step"}
    assert set(reached(saved, GRAPHED_LINE)) == {"Block.forward", "Helper.apply", "scale"}
    everything = [r for c in saved["captures"] for r in c["reached"]]
    # Called only outside the captures (or building the modules before them): not reached.
    assert not {"setup_only", "Helper.__init__", "Block.__init__", "Net.__init__"} & {r["qualname"] for r in everything}
    # torch's own functions (Module.__call__, Linear.forward) and cglint's are not the project's.
    assert {r["path"] for r in everything} == {"pkg/model.py", "pkg/ops.py"}
    # The host tracer still sees the capture's print: the recording chains with it.
    assert ("CG501", GRAPH_LINE + 2) in {(f["code"], f["line"]) for f in report["findings"]}


def test_reach_root_selects_a_tree_installed_elsewhere(tmp_path, monkeypatch, capsys):
    site = "venv/lib/site-packages"  # an installed package is not the project's by default
    files = {
        f"{site}/extlib/__init__.py": "",
        f"{site}/extlib/layers.py": """
            def inner(x):
                return x + 1


            def outer(x):
                return inner(x) * 2
        """,
        "run.py": f"""
            import sys

            sys.path.insert(0, {site!r})
            import torch
            from extlib import layers


            def mine(x):
                return layers.outer(x)


            g = torch.cuda.CUDAGraph()
            x = torch.ones(3, device="cuda")
            with torch.cuda.graph(g):
                y = mine(x)
        """,
    }
    write(tmp_path, files)
    verify(tmp_path, monkeypatch, capsys, "--save-reach", "default.json")
    default = json.loads((tmp_path / "default.json").read_text())
    assert set(reached(default, 14)) == {"mine"}

    verify(tmp_path, monkeypatch, capsys, "--save-reach", "lib.json", "--reach-root", f"{site}/extlib")
    chosen = reached(json.loads((tmp_path / "lib.json").read_text()), 14)
    assert set(chosen) == {"inner", "outer"}  # only the trees given count
    assert chosen["outer"]["path"] == f"{site}/extlib/layers.py" and chosen["outer"]["line"] == 5
    # The chain starts at the capture site and names only frames of the chosen trees.
    assert chosen["inner"]["via"] == ["run.py:15 <module>", f"{site}/extlib/layers.py:6 outer"]


def test_a_tree_outside_the_working_directory_is_named_by_its_absolute_path(tmp_path, monkeypatch, capsys):
    write(tmp_path, {
        "lib/shared.py": "def step(x):\n    return x * 2\n",
        "work/run.py": """
            import sys

            sys.path.insert(0, "../lib")
            import torch
            import shared

            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                y = shared.step(torch.ones(2, device="cuda"))
        """,
    })
    verify(tmp_path / "work", monkeypatch, capsys, "--save-reach", "r.json", "--reach-root", "../lib", "--reach-root", ".")
    step = reached(json.loads((tmp_path / "work" / "r.json").read_text()), 8)["step"]
    assert step["path"] == str(tmp_path / "lib" / "shared.py")


@pytest.mark.parametrize("ending, status", [
    ("raise RuntimeError('after the capture')", 1),
    ("os._exit(3)", 1),
    ("import sys; sys.exit(0)", 0),
])
def test_the_file_is_written_however_the_script_ends(tmp_path, monkeypatch, capsys, ending, status):
    write(tmp_path, {
        "run.py": f"""
            import os
            import torch


            def body(x):
                return x * 2


            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                y = body(torch.ones(2, device="cuda"))
            {ending}
        """,
    })
    code, report, _ = verify(tmp_path, monkeypatch, capsys, "--save-reach", "reach.json")
    assert code == status
    saved = json.loads((tmp_path / "reach.json").read_text())
    assert [(c["line"], [r["qualname"] for r in c["reached"]]) for c in saved["captures"]] == [(10, ["body"])]
    assert not [name for name in os.listdir(tmp_path) if name.startswith(".cglint-reach-")]  # no temporary left


def test_a_capture_the_script_dies_in_keeps_what_ran_before(tmp_path, monkeypatch, capsys):
    write(tmp_path, {
        "run.py": """
            import os
            import torch


            def first(x):
                return x + 1


            def last(x):
                os._exit(5)


            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                y = first(torch.ones(2, device="cuda"))
                last(y)
        """,
    })
    code, report, _ = verify(tmp_path, monkeypatch, capsys, "--save-reach", "reach.json")
    assert code == 1 and report["captures"][0]["status"] == "failed"
    saved = json.loads((tmp_path / "reach.json").read_text())
    assert {r["qualname"] for r in saved["captures"][0]["reached"]} == {"first", "last"}


@pytest.mark.parametrize("argv, message", [
    (["--save-reach", "missing/reach.json"], "no such directory: missing"),
    (["--save-reach", "."], "is a directory"),
    (["--reach-root", "."], "--reach-root needs --save-reach"),
    (["--save-reach", "r.json", "--reach-root", "nowhere"], "no such directory: nowhere"),
])
def test_a_bad_path_is_a_usage_error_before_the_script_runs(tmp_path, monkeypatch, capsys, argv, message):
    (tmp_path / "run.py").write_text("open('ran', 'w').close()\n")
    monkeypatch.chdir(tmp_path)
    assert cli.main([*argv, "run.py"]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "ran").exists()


def test_an_unwritable_file_is_a_usage_error(tmp_path, monkeypatch, capsys):
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        pytest.skip("root writes anywhere")
    (tmp_path / "locked").mkdir(mode=0o500)
    (tmp_path / "run.py").write_text("open('ran', 'w').close()\n")
    monkeypatch.chdir(tmp_path)
    assert cli.main(["--save-reach", "locked/r.json", "run.py"]) == 2
    assert "permission denied" in capsys.readouterr().err and not (tmp_path / "ran").exists()


def test_help_documents_the_options(capsys):
    assert cli.main(["--help"]) == 0
    out = capsys.readouterr().out
    assert "\n  --save-reach FILE " in out and "\n  --reach-root DIR " in out


# --- in one process: what a capture window installs and leaves behind ----------------------------

def _here_function(x):
    return x + 1


def _captured(recorder: Recorder, fn, *args):
    inst = Instrumentation(recorder, gpu=False, guard_reads=True).start()
    try:
        return inst, fn(*args)
    finally:
        inst.stop()


def test_without_the_flag_a_capture_installs_nothing():
    assert reach._active is None
    profile = sys.getprofile()
    recorder = Recorder(Region("x.py", 1, "torch.cuda.graph"), stop=sys._getframe(0))
    inst, _ = _captured(recorder, _here_function, torch.ones(2))
    assert inst._reach is None and sys.getprofile() is profile


def test_a_window_chains_with_the_hooks_already_set_and_puts_them_back(tmp_path):
    stream = str(tmp_path / "events.jsonl")
    reach.enable(events.Writer(stream), [os.path.dirname(os.path.abspath(__file__))])
    try:
        profile, trace = sys.getprofile(), sys.gettrace()
        recorder = Recorder(Region("x.py", 1, "torch.cuda.graph"), stop=sys._getframe(0))
        _captured(recorder, lambda x: (print("step"), _here_function(x)), torch.ones(2))
        assert sys.getprofile() is profile and sys.gettrace() is trace
        _here_function(torch.ones(1))  # after the window: not recorded
    finally:
        reach.disable()
    ran = reach.collect(stream)[("x.py", 1, "torch.cuda.graph")]
    here = reach.qualname(test_a_window_chains_with_the_hooks_already_set_and_puts_them_back.__code__)
    chains = {name: len(via) for (_, _, name), via in ran.items()}
    # From the test's frame (the capture site) through _captured, then the lambda.
    assert chains == {f"{here}.<locals>.<lambda>": 2, "_here_function": 3}
    assert "CG501" in {f.code for f in recorder.findings()}  # the host tracer's hook ran too


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU: real captures")
def test_real_captures_on_a_gpu(tmp_path, monkeypatch, capsys):
    write(tmp_path, PACKAGE)
    verify(tmp_path, monkeypatch, capsys, "--save-reach", "reach.json")
    saved = json.loads((tmp_path / "reach.json").read_text())
    graph = reached(saved, GRAPH_LINE)
    assert {"Net.forward", "Block.forward", "Helper.apply", "scale", "decorated", "on_forward",
            "second_pass"} <= set(graph)
    assert set(reached(saved, RAW_LINE)) == {"raw_step"}
    assert {r["path"] for c in saved["captures"] for r in c["reached"]} == {"pkg/model.py", "pkg/ops.py"}
