"""Property-based tests: whatever the source, the checker never raises, never reports an
internal error (CG000), keeps findings inside the file, and answers the same every time.

Three generators: programs from Python's grammar (hypothesmith, when installed), programs
built from hazard-shaped snippets in captured functions (so the engine's every phase runs),
and random mutations of the sample projects under fixtures/ (realistic code, broken in
realistic ways: lines deleted, duplicated, swapped, re-indented, truncated, odd characters).
Example counts stay small: the whole file runs in seconds on a 2-core machine.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cglint.check import check_files
from cglint.config import Config
from cglint.discovery import discover

from .helpers import functions_parsed_alone_match

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"

FAST = settings(max_examples=25, deadline=None, database=None, suppress_health_check=list(HealthCheck), derandomize=True)


def fixture_projects() -> list[Path]:
    return sorted(p for p in FIXTURES.iterdir() if p.is_dir() and not p.name.startswith((".", "_")) and any(p.rglob("*.py")))


def check_text(path: Path, text: str, files: list[Path], config: Config) -> list:
    """Findings for `files` where `path` holds `text` (nothing is written to disk)."""
    result = check_files(files, config, sources={path: text})
    return [f.to_json() for f in result.findings]


def whole_parse_findings(path: Path, text: str, files: list[Path], config: Config) -> list:
    """As check_text, with every module parsed whole (the reference for parsing functions alone)."""
    result = check_files(files, config, sources={path: text}, whole_modules=True)
    return [f.to_json() for f in result.findings]


def assert_sound(findings: list[dict], path: Path, text: str) -> None:
    internal = [f for f in findings if f["code"] == "CG000"]
    assert not internal, f"internal error on generated input:\n{text[:2000]}\n{internal}"
    lines = max(len(text.splitlines()), 1)
    name = path.name
    for f in findings:
        assert f["line"] >= 1 and f["column"] >= 1, f
        assert f["end_line"] >= f["line"], f
        if Path(f["path"]).name == name:
            assert f["end_line"] <= lines, f"finding past the end of a {lines}-line file: {f}\n{text[:2000]}"


# --- snippets: captured functions made of hazard-shaped statements ---------------------

NAMES = ["x", "y", "n", "mask", "xs", "self.w", "self.step", "out"]
EXPRS = [
    "x", "x.sum()", "x.item()", "x.shape[0]", "x.size(-1)", "torch.rand(3)", "torch.rand(3, device='cuda')",
    "self.w", "n", "x[mask]", "x[x > 0]", "random.random()", "len(xs)", "x.cpu()", "helper(x)", "self.block(x)",
    "lambda: x", "(y := x + 1)", "x if n else y", "[v for v in xs]", "{k: v for k, v in d.items()}",
    "torch.where(x > 0)", "torch.where(x > 0, x, y)", "x.nonzero()", "super().forward(x)", "g.replay()",
    "g.capture_begin()", "g.capture_end()", "np.random.rand()", "float(x)", "int(n)", "x.to('cuda')",
    "torch.tensor([1, 2])", "x.tolist()", "torch.cuda.synchronize()", "f'{x}'", "x @ y", "-x", "not n",
    "x and y", "*xs", "xs[1:2, ...]", "torch.unique(x)", "x.repeat_interleave(y)", "self.layers[0](x)",
    "Model()(x)", "torch.compile(helper, mode='reduce-overhead')", "torch.cuda.make_graphed_callables(helper, (x,))",
    "x.resize_(4)", "torch.manual_seed(0)", "print(x)", "time.time()", "open('f')", "x.copy_(y)", "await x",
    "(yield x)", "getattr(self, 'w')", "x.view(-1)[0]", "x[None]", "x.data", "type(x)(1)", "...",
]
SIMPLE = [
    "{name} = {expr}", "{name} += {expr}", "return {expr}", "print({expr})", "del {name}", "assert {expr}",
    "pass", "{expr}", "raise ValueError({expr})", "import random", "from torch import cuda", "global n",
    "nonlocal y", "{name}[{expr}] = {expr}", "out.copy_({expr})", "break", "continue", "x, *rest = {expr}",
    "{name}: int = {expr}", "return", "yield {expr}", "xs.append({expr})", "g = torch.cuda.CUDAGraph()",
]
COMPOUND = [
    "if {expr}:", "elif {expr}:", "else:", "while {expr}:", "for {name} in {expr}:", "for i in range(n):",
    "with torch.cuda.graph(g):", "with capture(g):", "with open('f') as fh:", "try:", "except Exception as e:",
    "finally:", "def helper(x, *args, n=1, **kw):", "async def ahelper(x):", "class Inner(nn.Module):",
    "match {expr}:", "case [a, *rest]:", "case {{'k': v}}:", "@torch.compile(mode='reduce-overhead')",
    "with torch.cuda.stream(s), torch.autocast('cuda'):", "lambda_ = lambda q: {expr}",
]


@st.composite
def statements(draw, depth: int = 0) -> list[str]:
    lines: list[str] = []
    for _ in range(draw(st.integers(1, 5))):
        indent = "    " * depth
        if depth < 3 and draw(st.booleans()):
            head = draw(st.sampled_from(COMPOUND)).format(expr=draw(st.sampled_from(EXPRS)), name=draw(st.sampled_from(NAMES)))
            lines.append(indent + head)
            if not head.endswith(":"):
                continue
            lines.extend(draw(statements(depth + 1)))
        else:
            line = draw(st.sampled_from(SIMPLE)).format(expr=draw(st.sampled_from(EXPRS)), name=draw(st.sampled_from(NAMES)))
            lines.append(indent + line)
    return lines


@st.composite
def captured_programs(draw) -> str:
    body = draw(statements(2))
    helper = draw(statements(1))
    top = draw(statements(0))
    return "\n".join(
        [
            "import random, time",
            "import numpy as np",
            "import torch",
            "from torch import nn",
            "from contextlib import contextmanager",
            "",
            "@contextmanager",
            "def capture(g):",
            "    with torch.cuda.graph(g):",
            "        yield",
            "",
            "def helper(x, n=2):",
            *helper,
            "",
            "class Model(nn.Module):",
            "    def __init__(self):",
            "        super().__init__()",
            "        self.block = nn.Linear(4, 4)",
            "        self.w = torch.zeros(4, device='cuda')",
            "    def forward(self, x, mask=None, xs=(), n=1):",
            *body,
            "",
            *top,
            "",
            "model = Model()",
            "g = torch.cuda.CUDAGraph()",
            "x = torch.zeros(4, device='cuda')",
            "with torch.cuda.graph(g):",
            "    out = model(x)",
            "for step in range(3):",
            "    g.replay()",
            "",
        ]
    )


@settings(FAST, max_examples=50)
@given(captured_programs())
def test_generated_captured_code_never_breaks_the_checker(tmp_path_factory, text):
    folder = tmp_path_factory.mktemp("gen")
    path = folder / "prog.py"
    config = Config(root=folder, captured=["Model.forward", "helper"])
    findings = check_text(path, text, [path], config)
    assert_sound(findings, path, text)
    assert check_text(path, text, [path], config) == findings  # deterministic within a process
    assert whole_parse_findings(path, text, [path], config) == findings


# --- Python's grammar ---------------------------------------------------------------------

try:
    import hypothesmith

    GRAMMAR = hypothesmith.from_grammar()  # built once: building it costs about half a second
except ImportError:  # pragma: no cover - optional test dependency
    hypothesmith = None
    GRAMMAR = st.just("")


@pytest.mark.skipif(hypothesmith is None, reason="hypothesmith is not installed")
@pytest.mark.filterwarnings("ignore::SyntaxWarning")  # hypothesmith compiles what it generates
@settings(FAST, max_examples=50)
@given(GRAMMAR)
def test_grammar_generated_source_never_breaks_the_checker(tmp_path_factory, text):
    folder = tmp_path_factory.mktemp("grammar")
    path = folder / "mod.py"
    # Add a capture so the engine parses and walks the module, not only the syntax check.
    captured = text + "\nimport torch\nwith torch.cuda.graph(g):\n    pass\n"
    for variant in (text, captured):
        findings = check_text(path, variant, [path], Config(root=folder))
        assert_sound(findings, path, variant)
    # The generated code as a function's and a method's body, each parsed alone and whole.
    body = textwrap.indent(text, "    ") + "\n    pass\n"
    nested = f"def f():\n{body}\nclass C:\n    @decorator\n    def m(self):\n{textwrap.indent(body, '    ')}"
    functions_parsed_alone_match(path, nested, require_outline=False)


# --- mutations of the sample projects -----------------------------------------------------

ODD = ["(", ")", ":", "\\", "'", '"""', "\t", "\r", "\x00", "\ufeff", "é", "#", "  ", "\n", "lambda", "yield", "[", "{", "="]
SNIPPETS = [
    "x = x.item()", "if x.sum() > 0:", "    pass", "with torch.cuda.graph(g):", "g.capture_begin()", "g.capture_end()",
    "return self.layers[0](x)", "del self.cache", "self.step += 1", "async def f(): await g()", "class A(B, metaclass=M): pass",
    "for i, (a, b) in enumerate(zip(xs, ys)):", "x = [y for y in x if y.item()]", "@property", "def forward(self, *a, **k):",
    "import torch as th", "from . import model", "from .. import nothing", "from .model import *",
]


@st.composite
def mutated_fixture(draw) -> tuple[Path, Path, str]:
    project = draw(st.sampled_from(fixture_projects()))
    files = sorted(project.rglob("*.py"))
    path = draw(st.sampled_from(files))
    lines = path.read_text("utf-8").splitlines(keepends=True)
    for _ in range(draw(st.integers(1, 4))):
        op = draw(st.sampled_from(["delete", "duplicate", "swap", "insert", "indent", "dedent", "truncate", "char"]))
        i = draw(st.integers(0, max(len(lines) - 1, 0)))
        if not lines:
            lines = ["\n"]
            i = 0
        if op == "delete":
            del lines[i]
        elif op == "duplicate":
            lines.insert(i, lines[i])
        elif op == "swap":
            j = draw(st.integers(0, len(lines) - 1))
            lines[i], lines[j] = lines[j], lines[i]
        elif op == "insert":
            current = lines[i]
            indent = current[: len(current) - len(current.lstrip(" \t"))]
            lines.insert(i, indent + draw(st.sampled_from(SNIPPETS)) + "\n")
        elif op == "indent":
            lines[i] = draw(st.sampled_from([" ", "    ", "\t"])) + lines[i]
        elif op == "dedent":
            lines[i] = lines[i].lstrip(" \t")
        elif op == "truncate":
            text = "".join(lines)
            cut = draw(st.integers(0, len(text)))
            lines = text[:cut].splitlines(keepends=True)
        elif op == "char":
            line = lines[i]
            at = draw(st.integers(0, len(line)))
            lines[i] = line[:at] + draw(st.sampled_from(ODD)) + line[at:]
    return project, path, "".join(lines)


@FAST
@given(mutated_fixture())
def test_mutated_fixtures_never_break_the_checker(case):
    project, path, text = case
    files, _ = discover([project], Config(root=project).excludes, project)
    findings = check_text(path, text, files, Config(root=project))
    assert_sound(findings, path, text)
    assert check_text(path, text, files, Config(root=project)) == findings
    assert whole_parse_findings(path, text, files, Config(root=project)) == findings


# --- determinism across processes, hash seeds and --jobs ------------------------------------

def _cli_json(args: list[str], cwd: Path, seed: str) -> dict:
    env = {**os.environ, "PYTHONHASHSEED": seed, "NO_COLOR": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "cglint", "check", "--format", "json", "--exit-zero", "--no-cache", *args],
        cwd=cwd, capture_output=True, text=True, env=env, timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_output_is_identical_across_processes_hash_seeds_and_jobs(tmp_path):
    # The fixtures, copied several times over; --jobs is accepted and must change nothing.
    tree = tmp_path / "tree"
    for copy in range(3):
        for project in fixture_projects():
            for source in project.rglob("*.py"):
                target = tree / f"copy{copy}" / project.name / source.relative_to(project)
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(source.read_bytes())
    (tree / "broken.py").write_text("def f(:\n    pass\n", encoding="utf-8")
    assert sum(1 for _ in tree.rglob("*.py")) >= 64
    runs = [_cli_json(["--jobs", jobs, "."], tree, seed) for jobs, seed in (("1", "1"), ("2", "2"))]
    assert runs[0]["files_checked"] >= 64 and runs[0]["findings"], "the tree must produce findings to compare"
    for other in runs[1:]:
        assert other == runs[0]
