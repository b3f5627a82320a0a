"""`cglint reach` and the coverage counts of `cglint check`: what the checker followed from
each capture, and what it could not, so that a pass is never read as "checked" blindly."""
from __future__ import annotations

import json

import jsonschema

from cglint.cli import main

from .helpers import write_project

ENGINE = {
    "serve/model.py": """
        import torch
        from torch import nn

        class MLP(nn.Module):
            def __init__(self, dim):
                super().__init__()
                self.up = nn.Linear(dim, 4 * dim)
                self.down = nn.Linear(4 * dim, dim)

            def forward(self, x):
                return self.down(torch.relu(self.up(x)))

        class Model(nn.Module):
            def __init__(self, dim, post=None):
                super().__init__()
                self.mlp = MLP(dim)
                self.post = post

            def forward(self, x):
                def scale(t):
                    return t * 0.5
                h = scale(self.mlp(x)).transpose(0, 1)
                return self.post(h)

            def unused(self, x):
                return x
    """,
    "serve/runner.py": """
        import torch
        from .model import Model

        def capture(model, x):
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                out = model(x)
            return g, out

        def main(post):
            model = Model(8, post)
            x = torch.zeros(2, 8, device="cuda")
            return capture(model, x)
    """,
}

SCHEMA = {
    "type": "object",
    "required": ["version", "captures"],
    "properties": {
        "captures": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["path", "line", "kind", "reached", "unresolved"],
                "properties": {
                    "reached": {"type": "array", "items": {"type": "object", "required": ["path", "qualname", "line", "via"]}},
                    "unresolved": {"type": "array", "items": {"type": "object", "required": ["path", "line", "call", "why"]}},
                },
            },
        }
    },
}


def _graph_block(report: dict) -> dict:
    [capture] = [c for c in report["captures"] if c["kind"] == "torch.cuda.graph"]
    return capture


def _reach(tmp_path, monkeypatch, capsys, *args):
    write_project(tmp_path, ENGINE)
    monkeypatch.chdir(tmp_path)
    code = main(["reach", *args])
    return code, capsys.readouterr().out


def test_reach_json_lists_each_function_run_by_the_capture_with_its_chain(tmp_path, monkeypatch, capsys):
    code, out = _reach(tmp_path, monkeypatch, capsys, "--format", "json", "serve")
    assert code == 0
    report = json.loads(out)
    jsonschema.validate(report, SCHEMA)
    capture = _graph_block(report)
    assert (capture["path"], capture["line"]) == ("serve/runner.py", 6)
    reached = {(r["path"], r["qualname"]) for r in capture["reached"]}
    assert reached == {
        ("serve/model.py", "Model.forward"),
        ("serve/model.py", "Model.forward.<locals>.scale"),
        ("serve/model.py", "MLP.forward"),
    }
    mlp = next(r for r in capture["reached"] if r["qualname"] == "MLP.forward")
    assert mlp["line"] == 10
    assert mlp["via"] == ["serve/runner.py:6 with torch.cuda.graph(g)", "serve/runner.py:7 model(x)", "serve/model.py:22 self.mlp(x)"]


def test_reach_names_calls_it_could_not_follow_and_why(tmp_path, monkeypatch, capsys):
    _, out = _reach(tmp_path, monkeypatch, capsys, "--format", "json", "serve")
    capture = _graph_block(json.loads(out))
    # `self.post` comes from a parameter no caller gives: the call may run project code.
    assert [(u["path"], u["line"], u["call"]) for u in capture["unresolved"]] == [("serve/model.py", 23, "self.post")]
    assert "not known" in capture["unresolved"][0]["why"] and "captured" in capture["unresolved"][0]["why"]
    # Tensor methods (`.transpose`), torch functions and nn.Linear are not the project's code.


def test_reach_text_lists_functions_and_ends_with_the_counts(tmp_path, monkeypatch, capsys):
    code, out = _reach(tmp_path, monkeypatch, capsys, "serve")
    assert code == 0
    # Each call of a capture helper is a capture site of its own (it captures what it is given).
    assert "serve/runner.py:6: torch.cuda.graph" in out and "serve/runner.py:13: capture helper capture" in out
    assert "reaches serve/model.py:10 MLP.forward" in out
    assert "not followed serve/model.py:23 `self.post`" in out
    assert out.rstrip().endswith("2 captures followed into 3 functions, 1 call not followed (`cglint reach` lists them).")


def test_check_summary_says_how_much_was_followed(tmp_path, monkeypatch, capsys):
    write_project(tmp_path, ENGINE)
    monkeypatch.chdir(tmp_path)
    assert main(["check", "--no-cache", "serve"]) == 0
    out = capsys.readouterr().out
    assert out.strip() == "All checks passed (2 files checked; 2 captures followed into 3 functions, 1 call not followed (`cglint reach` lists them))."


def test_counts_come_back_from_the_cache(tmp_path, monkeypatch, capsys):
    write_project(tmp_path, ENGINE)
    monkeypatch.chdir(tmp_path)
    main(["check", "serve"])
    first = capsys.readouterr().out
    main(["check", "serve"])
    assert capsys.readouterr().out == first
    assert "2 captures followed into 3 functions" in first


def test_no_capture_is_not_reported_as_a_pass(tmp_path, monkeypatch, capsys):
    write_project(tmp_path, {"util.py": "def add(a, b):\n    return a + b\n", "broken.py": "def f(:\n"})
    monkeypatch.chdir(tmp_path)
    assert main(["check", "--no-cache", "."]) == 0
    out = capsys.readouterr().out
    assert "All checks passed" not in out
    assert out.strip() == "No capture found in 2 files checked: no code was checked for CUDA-graph hazards."
    assert main(["reach", "."]) == 0
    assert capsys.readouterr().out.strip() == "No capture found."


def test_an_empty_folder_says_nothing_was_checked(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["check", "--no-cache", "."]) == 0
    assert capsys.readouterr().out.strip() == "No Python files found: nothing was checked."


def test_a_library_class_under_a_module_alias_is_no_unfollowed_call(tmp_path, monkeypatch, capsys):
    # gpt-fast writes `RMSNorm = nn.RMSNorm`, then `self.norm = RMSNorm(dim)`: torch's module,
    # not project code the checker failed to follow.
    write_project(tmp_path, {
        "net.py": """
            import torch
            from torch import nn

            RMSNorm = nn.RMSNorm

            class Net(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.norm = RMSNorm(8)

                def forward(self, x):
                    return self.norm(x)

            def main(x):
                net = Net()
                g = torch.cuda.CUDAGraph()
                with torch.cuda.graph(g):
                    y = net(x)
        """,
    })
    monkeypatch.chdir(tmp_path)
    assert main(["reach", "--format", "json", "net.py"]) == 0
    [capture] = json.loads(capsys.readouterr().out)["captures"]
    assert [r["qualname"] for r in capture["reached"]] == ["Net.forward"]
    assert capture["unresolved"] == []
