"""Whatever a repository holds, `cglint check` reports it clearly and goes on: it never
crashes, never hangs, and never passes a file it could not read as clean."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections import Counter
from pathlib import Path

import pytest

from cglint.check import check_paths
from cglint.cli import main
from cglint.config import Config
from cglint.engine.positions import Positions

CAPTURE = "import torch\ng = torch.cuda.CUDAGraph()\nx = torch.zeros(4, device='cuda')\nwith torch.cuda.graph(g):\n"


def check(root: Path, *paths: Path):
    return check_paths(list(paths) or [root], Config(root=root)).findings


def where(findings) -> set[tuple[str, str, int]]:
    return {(Path(f.path).name, f.code, f.line) for f in findings}


def run(args: list[str], cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess:
    """cglint in its own process: a crash of the interpreter must fail the test, not pytest."""
    return subprocess.run(
        [sys.executable, "-m", "cglint", *args], cwd=cwd, capture_output=True, text=True, timeout=timeout,
        env={**os.environ, "NO_COLOR": "1"},
    )


def cli(capsys, *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


# --- syntax and encodings ----------------------------------------------------------------

# Names a capture form: a file that could capture is always parsed, and its syntax checked.
CAPTURE_FORM = "import torch\ng = torch.cuda.CUDAGraph()\n"


def test_syntax_error_is_reported_and_the_other_files_are_still_checked(tmp_path):
    (tmp_path / "broken.py").write_text(CAPTURE_FORM + "def f(:\n    pass\n")
    (tmp_path / "good.py").write_text(CAPTURE + "    y = x.item()\n")
    # No capture form and nothing reaches it: a general linter's business, not cglint's.
    (tmp_path / "plain.py").write_text("def f(:\n    pass\n")
    found = check(tmp_path)
    assert where(found) == {("broken.py", "CG002", 3), ("good.py", "CG101", 5)}
    broken = next(f for f in found if f.code == "CG002")
    # CPython's own words, which differ between its versions; the position does not.
    assert broken.message.startswith("syntax error: ") and broken.column == 7


def test_syntax_error_in_a_file_with_a_capture(tmp_path):
    (tmp_path / "m.py").write_text(CAPTURE + "    y = x.item(\n")
    [finding] = check(tmp_path)
    assert (finding.code, finding.line, finding.column, finding.message) == ("CG002", 5, 15, "syntax error: '(' was never closed")


def test_invalid_utf8_without_a_coding_declaration(tmp_path):
    (tmp_path / "first.py").write_bytes(b"y = '\xff\xfe'\n")  # on the line a coding declaration may use
    (tmp_path / "later.py").write_bytes(b"x = 1\n\ny = '\xff\xfe'\n")
    found = {Path(f.path).name: f for f in check(tmp_path)}
    # One wording wherever the byte is (tokenize refuses it in the first two lines, where a
    # coding declaration may stand; the codec after them).
    assert found["first.py"].message == found["later.py"].message == "cannot decode file: invalid UTF-8 (byte 0xff) and no coding declaration"
    assert (found["first.py"].line, found["first.py"].column) == (1, 6)
    assert (found["later.py"].line, found["later.py"].column) == (3, 6)
    assert {f.code for f in found.values()} == {"CG001"}


def test_a_byte_the_declared_encoding_refuses_is_named_with_it(tmp_path):
    (tmp_path / "ascii.py").write_bytes(b"# coding: ascii\nx = 1\ny = '\xff'\n")
    (tmp_path / "utf8.py").write_bytes(b"# -*- coding: utf-8 -*-\nx = 1\ny = '\xff'\n")
    (tmp_path / "bom.py").write_bytes(b"\xef\xbb\xbfx = 1\n\ny = '\xff'\n")
    found = {Path(f.path).name: f for f in check(tmp_path)}
    assert found["ascii.py"].message == "cannot decode file: invalid ascii (byte 0xff), the encoding its coding declaration names"
    assert found["utf8.py"].message == "cannot decode file: invalid UTF-8 (byte 0xff), the encoding its coding declaration names"
    assert found["bom.py"].message == "cannot decode file: invalid UTF-8 (byte 0xff) after a UTF-8 byte-order mark"
    assert (found["bom.py"].line, found["bom.py"].column) == (3, 6)  # the byte's, not shifted by the mark


def test_declared_latin1_file_is_decoded(tmp_path):
    (tmp_path / "m.py").write_bytes(b"# -*- coding: latin-1 -*-\n" + CAPTURE.encode() + b"    s = '\xe9'; y = x.item()\n")
    assert where(check(tmp_path)) == {("m.py", "CG101", 6)}


def test_unknown_coding_declaration(tmp_path):
    (tmp_path / "m.py").write_bytes(b"# coding: no-such-codec\nx = 1\n")
    [finding] = check(tmp_path)
    assert finding.code == "CG001" and "unknown encoding" in finding.message


def test_bom_file_is_checked_with_columns_of_the_text(tmp_path):
    (tmp_path / "m.py").write_bytes(b"\xef\xbb\xbf" + CAPTURE.encode() + b"    y = x.item()\n")
    [finding] = check(tmp_path)
    assert (finding.code, finding.line, finding.column) == ("CG101", 5, 9)


def test_bom_with_a_conflicting_coding_declaration(tmp_path):
    (tmp_path / "m.py").write_bytes(b"\xef\xbb\xbf# coding: latin-1\nx = 1\n")
    [finding] = check(tmp_path)
    assert finding.code == "CG001" and "byte-order mark" in finding.message


def test_crlf_line_endings_keep_lines_and_columns(tmp_path):
    (tmp_path / "m.py").write_bytes((CAPTURE + "    y = x.item()\n").replace("\n", "\r\n").encode())
    [finding] = check(tmp_path)
    assert (finding.code, finding.line, finding.column, finding.end_column) == ("CG101", 5, 9, 17)


def test_old_mac_line_endings(tmp_path):
    (tmp_path / "m.py").write_bytes((CAPTURE + "    y = x.item()\n").replace("\n", "\r").encode())
    [finding] = check(tmp_path)  # a lone carriage return ends a line, as in Python
    assert (finding.code, finding.line, finding.column) == ("CG101", 5, 9)


def test_tab_indentation(tmp_path):
    (tmp_path / "m.py").write_text(CAPTURE + "\ty = x.item()\n")
    [finding] = check(tmp_path)
    assert (finding.code, finding.line, finding.column) == ("CG101", 5, 6)  # columns count characters


def test_inconsistent_tabs_and_spaces(tmp_path):
    (tmp_path / "m.py").write_text(CAPTURE_FORM + "if True:\n        x = 1\n\ty = 2\n")
    [finding] = check(tmp_path)
    assert finding.code == "CG002" and "tab" in finding.message.lower()


@pytest.mark.parametrize("capture", [False, True])
def test_null_byte(tmp_path, capture):
    (tmp_path / "m.py").write_bytes((CAPTURE if capture else "").encode() + b"x = 1\ny = 2\x00\n")
    [finding] = check(tmp_path)
    assert finding.code == "CG001" and "null byte" in finding.message
    assert finding.line == (6 if capture else 2)


# --- size and depth (how long these take: bench/sizes.py) ---------------------------------

def test_file_of_50000_lines_without_a_capture(tmp_path):
    (tmp_path / "big.py").write_text("".join(f"def f{i}(x):\n    return x + {i}\n" for i in range(25_000)))
    assert check(tmp_path) == []


def test_file_of_50000_lines_with_a_capture(tmp_path):
    body = "".join(f"v{i} = {i}\n" for i in range(49_990))
    (tmp_path / "big.py").write_text(CAPTURE.replace("with", body + "with") + "    y = x.item()\n")
    [finding] = check(tmp_path)
    assert (finding.code, finding.line, finding.column) == ("CG101", 49_995, 9)


TOO_DEEP = "file is nested too deeply to parse (Python's own parser refuses it too)"
NESTED = {  # name: (text, {(code, line, message or "" for a rule's): count})
    # CPython refuses these: cglint must say so, not crash (libcst's parser overflows its stack).
    "parens_5000": (CAPTURE_FORM + "x = " + "(" * 5000 + "1" + ")" * 5000 + "\n", {("CG002", 3, "syntax error: too many nested parentheses"): 1}),
    "unary_20000": (CAPTURE + "    y = " + "-" * 20000 + "x\n", {("CG002", 1, TOO_DEEP): 1}),
    "binop_5000": (CAPTURE + "    y = " + " + ".join(["x"] * 5000) + "\n", {("CG002", 1, TOO_DEEP): 1}),
    "indent_120": (CAPTURE_FORM + "".join(" " * i + f"if x{i}:\n" for i in range(120)) + " " * 120 + "pass\n",
                   {("CG002", 103, "syntax error: too many levels of indentation"): 1}),
    # Valid, but deeper than Python's default recursion limit lets libcst walk: every hazard found.
    "binop_900": (CAPTURE + "    y = " + " + ".join(["x.item()"] * 900) + "\n", {("CG101", 5, ""): 900}),
    "brackets_190": (CAPTURE + "    y = " + "[" * 190 + "x.item()" + "]" * 190 + "\n", {("CG101", 5, ""): 1}),
    "calls_300": (CAPTURE + "    y = x.item" + "()" * 300 + "\n", {("CG101", 5, ""): 1}),
    "ternary_400": (CAPTURE + "    y = " + "x.item() if x.sum() > 0 else " * 400 + "1\n", {("CG101", 5, ""): 400, ("CG201", 5, ""): 400}),
}


def test_deep_nesting_is_reported_never_a_crash(tmp_path):
    for name, (text, _) in NESTED.items():
        (tmp_path / f"{name}.py").write_text(text)
    done = run(["check", "--no-cache", "--format", "json", "."], tmp_path, timeout=300)
    assert done.returncode == 1, done.stderr[-3000:]
    report = json.loads(done.stdout)
    assert report["files_checked"] == len(NESTED)
    for name, (_, expected) in NESTED.items():
        mine = [f for f in report["findings"] if f["path"] == f"{name}.py"]
        found = Counter((f["code"], f["line"], f["message"] if f["code"] == "CG002" else "") for f in mine)
        assert found == expected, (name, mine[:3])


# --- the file system ----------------------------------------------------------------------

def test_unreadable_file(tmp_path):
    path = tmp_path / "secret.py"
    path.write_text("x = 1\n")
    path.chmod(0)
    try:
        try:
            path.read_bytes()
            pytest.skip("this user can read a file with mode 000 (root)")
        except PermissionError:
            pass
        [finding] = check(tmp_path)
        assert finding.code == "CG001" and "Permission denied" in finding.message
    finally:
        path.chmod(0o644)


def test_broken_symlink_and_symlink_loop_are_reported(tmp_path):
    (tmp_path / "good.py").write_text("x = 1\n")
    (tmp_path / "broken.py").symlink_to(tmp_path / "nowhere.py")
    (tmp_path / "loop_a.py").symlink_to(tmp_path / "loop_b.py")
    (tmp_path / "loop_b.py").symlink_to(tmp_path / "loop_a.py")
    for paths in ([], [tmp_path / "broken.py", tmp_path / "loop_a.py"]):
        found = check(tmp_path, *paths)
        messages = {Path(f.path).name: f.message for f in found}
        assert {f.code for f in found} == {"CG001"}
        assert "broken symbolic link" in messages["broken.py"]
        assert "symbolic link loop" in messages["loop_a.py"]


def test_a_broken_symlink_is_reported_under_the_path_the_user_gave(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "src").mkdir()
    (tmp_path / "src/broken.py").symlink_to("nowhere.py")
    for args in (["src/broken.py"], ["src"], ["."]):
        code, out, _ = cli(capsys, "check", "--no-cache", "--format", "json", *args)
        [finding] = json.loads(out)["findings"]
        assert (code, finding["path"], finding["code"]) == (1, "src/broken.py", "CG001"), args
        assert "broken symbolic link (it points to 'nowhere.py'" in finding["message"]


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no named pipes on this system")
def test_a_named_pipe_is_reported_never_read(tmp_path):
    """Opening a named pipe waits for a writer: named on the command line, it hung the run."""
    os.mkfifo(tmp_path / "fifo.py")
    (tmp_path / "good.py").write_text(CAPTURE + "    y = x.item()\n")
    for args in (["fifo.py", "good.py"], ["."]):
        done = run(["check", "--no-cache", "--format", "json", *args], tmp_path, timeout=60)
        found = {(f["path"], f["code"]): f["message"] for f in json.loads(done.stdout)["findings"]}
        if args == ["."]:  # walking a folder, only regular files are Python files
            assert set(found) == {("good.py", "CG101")}
            continue
        assert done.returncode == 1 and set(found) == {("fifo.py", "CG001"), ("good.py", "CG101")}
        assert found["fifo.py", "CG001"] == "cannot read file: it is a named pipe (FIFO), not a regular file"
    done = run(["check", "fifo.py"], tmp_path, timeout=60)  # the text report shows no source line for it
    assert done.returncode == 1 and "fifo.py:1:1: CG001" in done.stdout


def test_symlink_loop_on_the_command_line(tmp_path, capsys):
    (tmp_path / "a.py").symlink_to(tmp_path / "b.py")
    (tmp_path / "b.py").symlink_to(tmp_path / "a.py")
    code, out, err = cli(capsys, "check", "--no-cache", str(tmp_path / "a.py"), str(tmp_path))
    assert code == 1 and "symbolic link loop" in out and "Traceback" not in err


def test_directory_named_like_a_python_file(tmp_path, capsys):
    (tmp_path / "pkg.py").mkdir()
    (tmp_path / "pkg.py" / "inner.py").write_text(CAPTURE + "    y = x.item()\n")
    assert where(check(tmp_path)) == {("inner.py", "CG101", 5)}
    assert where(check(tmp_path, tmp_path / "pkg.py")) == {("inner.py", "CG101", 5)}


def test_missing_path(tmp_path, capsys):
    code, out, err = cli(capsys, "check", "--no-cache", str(tmp_path / "nope.py"))
    assert (code, out) == (2, "") and err == f"cglint: error: path not found: {tmp_path / 'nope.py'}\n"


# --- configuration and selection ---------------------------------------------------------

@pytest.mark.parametrize(
    "toml, words",
    [
        ("[tool.cglint]\nselec = ['CG1']\n", "unknown setting 'selec'"),
        ("[tool.cglint]\nselect = 'CG1'\n", "must be a list of strings"),
        ("[tool.cglint]\ncaptured = [1]\n", "must be a list of strings"),
        ("[tool.cglint\nselect = ['CG1']\n", "invalid TOML"),
        ("[tool.cglint]\nselect = ['CG999']\n", "unknown rule selector 'CG999'"),
        ("[tool.cglint]\nper-file-ignores = { 'a.py' = ['XX1'] }\n", "unknown rule selector 'XX1'"),
        ("[tool.cglint]\nper-file-ignores = { 'a.py' = 'CG1' }\n", "must be a list of codes"),
    ],
)
def test_invalid_configuration_exits_2_with_a_clear_message(tmp_path, capsys, monkeypatch, toml, words):
    (tmp_path / "pyproject.toml").write_text(toml)
    (tmp_path / "a.py").write_text(CAPTURE + "    y = x.item()\n")
    monkeypatch.chdir(tmp_path)
    code, out, err = cli(capsys, "check", "--no-cache", ".")
    assert code == 2 and words in err and "Traceback" not in err


def test_configuration_file_that_cannot_be_decoded(tmp_path, capsys):
    config = tmp_path / "cglint.toml"
    config.write_bytes(b"select = ['\xff']\n")
    code, out, err = cli(capsys, "check", "--no-cache", "--config", str(config), str(tmp_path))
    assert code == 2 and "cannot read configuration" in err


@pytest.mark.parametrize("args", [["check", "--select", "CG999"], ["check", "--ignore", "nonsense"], ["rule", "CG999"]])
def test_unknown_rule_code_exits_2(tmp_path, capsys, args):
    code, out, err = cli(capsys, *args, *([str(tmp_path)] if args[0] == "check" else []))
    assert code == 2 and "unknown rule" in err


# --- concurrency and the cache -----------------------------------------------------------

def _tree(root: Path) -> Path:
    for i in range(6):
        (root / f"m{i}.py").write_text(CAPTURE + f"    y{i} = x.item()\n")
    return root


def test_two_processes_on_the_same_tree_at_once(tmp_path):
    _tree(tmp_path)
    command = [sys.executable, "-m", "cglint", "check", "--format", "json", "."]
    processes = [subprocess.Popen(command, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outputs = [p.communicate(timeout=120) for p in processes]
    assert [p.returncode for p in processes] == [1, 1], outputs
    reports = [json.loads(out) for out, _ in outputs]
    assert reports[0] == reports[1]
    assert {(f["path"], f["code"], f["line"]) for f in reports[0]["findings"]} == {(f"m{i}.py", "CG101", 5) for i in range(6)}
    # The cache they both wrote answers a third run with the same report.
    again = run(["check", "--format", "json", "."], tmp_path)
    assert json.loads(again.stdout) == reports[0]


def test_corrupt_cache_entries_are_ignored(tmp_path):
    _tree(tmp_path)
    first = run(["check", "--format", "json", "."], tmp_path)
    cache = tmp_path / ".cglint_cache"
    entries = list(cache.glob("*.json"))
    assert entries, "the run should have stored a result"
    for entry in entries:
        entry.write_bytes(b"\x00{not json")
    again = run(["check", "--format", "json", "."], tmp_path)
    assert again.returncode == 1 and json.loads(again.stdout) == json.loads(first.stdout)
    for entry in cache.glob("*.json"):
        entry.write_text(json.dumps({"deps": {}, "findings": [{"path": 1}], "files_checked": "x"}))
    third = run(["check", "--format", "json", "."], tmp_path)
    assert json.loads(third.stdout) == json.loads(first.stdout)


def test_cache_that_cannot_be_written(tmp_path):
    _tree(tmp_path)
    (tmp_path / ".cglint_cache").write_text("a file where the cache folder should be")
    done = run(["check", "--format", "json", "."], tmp_path)
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert {(f["path"], f["code"], f["line"]) for f in json.loads(done.stdout)["findings"]} == {(f"m{i}.py", "CG101", 5) for i in range(6)}


def test_read_only_cache_folder(tmp_path):
    _tree(tmp_path)
    run(["check", "."], tmp_path)
    cache = tmp_path / ".cglint_cache"
    (tmp_path / "m0.py").write_text(CAPTURE + "    z = x.cpu()\n")  # a miss that cannot be stored
    cache.chmod(0o555)
    try:
        done = run(["check", "--format", "json", "."], tmp_path)
    finally:
        cache.chmod(0o755)
    assert done.returncode == 1 and "Traceback" not in done.stderr
    found = {(f["path"], f["code"], f["line"]) for f in json.loads(done.stdout)["findings"]}
    assert found == {("m0.py", "CG102", 5)} | {(f"m{i}.py", "CG101", 5) for i in range(1, 6)}


# --- positions resolved per statement equal positions resolved for the whole module -------

TRICKY = textwrap.dedent(
    '''\
    """Docstring."""
    # comment
    import torch; import os

    @decorator(
        1,
    )
    async def f(x,
                y):
        a = x; b = \\
            y
        return [i for i in
                range(3)]

    class C(
        Base,
    ):
        # inside
        def m(self):  # trailing
            if self.x:
                pass
            else:
                return (1 +
                        2)
    x = f"{1}" "two"

    class D:
        @staticmethod
        def one(): return 1
        def text(self):
            """A docstring."""
    # a comment less indented than the body
            s = """
    flush left
    """
            return s.strip()

    def wrap(f):
        @functools.wraps(f)
        def inner(*args):
            return f(*args)
        return inner

    if TYPE_CHECKING:
        def g(): ...
    elif FLAG:
        def g():
            return torch.zeros(1).item()
    else:
        def g():  \
            return 2
    '''
)


@pytest.mark.parametrize("newline", ["\n", "\r\n"])
def test_positions_by_statement_equal_whole_module_positions(tmp_path, newline):
    import libcst as cst
    from libcst.metadata import MetadataWrapper, PositionProvider

    from cglint.engine.project import Project
    from cglint.engine.syntax import descendants

    fixtures = Path(__file__).resolve().parent.parent / "fixtures"
    sources = [TRICKY.replace("\n", newline)] + [p.read_text("utf-8") for p in sorted(fixtures.rglob("*.py"))[:8]]
    assert len(sources) == 9
    for index, text in enumerate(sources):
        path = tmp_path / f"m{index}.py"
        path.write_bytes(text.encode())
        module = Project(str, lambda *a: None, whole_modules=True).module_for_path(path, text)
        expected = MetadataWrapper(module.tree, unsafe_skip_copy=True).resolve(PositionProvider)
        fast = Positions()
        nodes = [n for n in expected if isinstance(n, (cst.BaseExpression, cst.BaseStatement, cst.BaseSmallStatement))]
        assert nodes
        for node in nodes:
            assert fast.of(module, node) == expected[node], (index, type(node).__name__)
        # Functions parsed alone, from the skeleton, have the positions they have in the whole module.
        lazy = Project(str, lambda *a: None).module_for_path(tmp_path / f"m{index}.py", text)
        lazy_positions = Positions()
        pairs = [(module.functions, lazy.functions)] + [(c.methods, lazy.classes[n].methods) for n, c in module.classes.items()]
        for whole_functions, lazy_functions in pairs:
            for name, whole in whole_functions.items():
                part = lazy_functions[name]
                whole_nodes, part_nodes = list(descendants(whole.node.body)), list(descendants(part.node.body))
                assert len(whole_nodes) == len(part_nodes)
                for a, b in zip(whole_nodes, part_nodes):
                    assert type(a) is type(b)
                    if a in expected:
                        assert lazy_positions.of(lazy, b) == expected[a], (index, name, type(a).__name__)


def test_a_function_libcst_cannot_parse_alone_is_reported_at_its_line(tmp_path, monkeypatch):
    """CPython accepted the file, so its functions are parsed one by one; should libcst
    refuse one of them, the error points into the file and the rest is still checked."""
    from cglint import source

    (tmp_path / "runner.py").write_text(
        "import torch\n"
        "\n"
        "class Runner:\n"
        "    def broken(self, x):\n"
        "        return x\n"
        "\n"
        "    def step(self, x):\n"
        "        return x.item()\n"
        "\n"
        "    def capture(self, x):\n"
        "        g = torch.cuda.CUDAGraph()\n"
        "        with torch.cuda.graph(g):\n"
        "            self.broken(x)\n"
        "            self.step(x)\n"
    )
    parse = source.parse

    def refusing(text, cpython_accepts=False):
        if "def broken" in text and "def capture" not in text:  # `broken` alone, not the module
            return source.SourceError("CG002", "syntax error: refused", line=2, column=5)
        return parse(text, cpython_accepts)

    monkeypatch.setattr(source, "parse", refusing)
    assert where(check(tmp_path)) == {("runner.py", "CG002", 4), ("runner.py", "CG101", 8)}


def test_paths_resolve_as_pathlib_resolves_them_through_links_and_parents(tmp_path, monkeypatch):
    from cglint.discovery import forget_folders, resolved

    (tmp_path / "real/pkg").mkdir(parents=True)
    (tmp_path / "real/pkg/m.py").write_text("x = 1\n")
    (tmp_path / "linked").symlink_to(tmp_path / "real")
    (tmp_path / "real/alias.py").symlink_to(tmp_path / "real/pkg/m.py")
    (tmp_path / "loop.py").symlink_to(tmp_path / "loop.py")
    monkeypatch.chdir(tmp_path / "real/pkg")
    forget_folders()
    for text in ["m.py", "../alias.py", "../../linked/pkg/m.py", "../../linked/pkg/../alias.py", ".", "..", "nowhere/x.py", str(tmp_path / "linked/pkg")]:
        assert resolved(Path(text)) == Path(text).resolve(), text
    assert resolved(tmp_path / "loop.py") == tmp_path / "loop.py"  # a loop: the absolute path
