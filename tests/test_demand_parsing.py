"""Parsing only what can matter gives exactly the findings of parsing everything."""
from __future__ import annotations

from pathlib import Path

from cglint.check import check_files
from cglint.config import Config
from cglint.discovery import discover

from .helpers import functions_parsed_alone_match

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"


def test_demand_driven_parsing_equals_parsing_every_file(monkeypatch):
    monkeypatch.chdir(FIXTURES)
    files, _ = discover([Path(".")], Config(root=FIXTURES).excludes, FIXTURES)
    fast = check_files(files, Config(root=FIXTURES))
    full = check_files(files, Config(root=FIXTURES), prefilter=False)
    assert fast.findings and fast.findings == full.findings


def test_demand_driven_parsing_equals_parsing_every_file_on_real_code(monkeypatch):
    tree = _torch_package("cuda")
    monkeypatch.chdir(tree)
    files, _ = discover([Path(".")], Config(root=tree).excludes, tree)
    fast = check_files(files, Config(root=tree))
    full = check_files(files, Config(root=tree), prefilter=False)
    assert len(files) > 20
    assert fast.findings == full.findings
    # torch/cuda alone has no findings: name some of its functions as captured, as a user of
    # a capture helper would, so that the two ways compare findings, not two empty lists.
    captured = Config(root=tree, captured=["get_rng_state", "set_rng_state", "manual_seed", "memory_stats", "Event.elapsed_time"])
    fast = check_files(files, captured)
    assert fast.findings and fast.findings == check_files(files, captured, prefilter=False).findings


def _torch_package(name: str) -> Path:
    import importlib.util

    import pytest

    spec = importlib.util.find_spec("torch")  # locates torch's sources without importing it
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("torch's sources are not installed")
    return Path(list(spec.submodule_search_locations)[0]) / name


def test_statements_parsed_alone_equal_a_whole_parse_around_a_module_level_capture(monkeypatch):
    # A raw capture begun at the top of a script makes every statement after it part of the
    # region, `def`s included: a def runs its decorators there, not its body. A module parsed
    # statement by statement (bodies left out) and one parsed whole must agree on that.
    monkeypatch.chdir(FIXTURES.parent)
    project = FIXTURES / "clean_project"
    path = project / "infer.py"
    text = "g.capture_begin()\n" + path.read_text()
    files, _ = discover([project], Config(root=project).excludes, project)
    lazy = check_files(files, Config(root=project), sources={path: text}).findings
    whole = check_files(files, Config(root=project), sources={path: text}, whole_modules=True).findings
    assert lazy == whole


def test_functions_parsed_alone_equal_a_whole_parse():
    assert sum(functions_parsed_alone_match(p) for p in sorted(FIXTURES.rglob("*.py"))) > 50


def test_functions_parsed_alone_equal_a_whole_parse_on_real_code():
    paths = sorted(_torch_package("cuda").rglob("*.py")) + [_torch_package("_tensor.py"), _torch_package("nn/modules/module.py")]
    assert sum(functions_parsed_alone_match(p) for p in paths) > 500


# A model library: many modules define `forward` and many pipelines name the models; the
# configured entries are one model's forward (by its full name), a block's forward (by a name
# relative to its module) and a function of a module (by its module's name).
LIBRARY = {
    "lib/__init__.py": "",
    "lib/models/__init__.py": "",
    "lib/models/unet.py": """
        import torch
        from lib.layers import Block

        class UNet(torch.nn.Module):
            def forward(self, x):
                if x.sum().item() > 0:
                    x = x * 2
                return Block()(x)
        """,
    "lib/layers.py": """
        import torch

        class Block(torch.nn.Module):
            def forward(self, x):
                return x.cpu()
        """,
    "lib/ops.py": """
        def fused_step(x):
            return x.nonzero()
        """,
    **{
        f"lib/models/other{i}.py": f"""
        import torch

        class Other{i}(torch.nn.Module):
            def forward(self, x):
                return x.item()
        """
        for i in range(12)
    },
    **{
        f"lib/pipelines/p{i}.py": """
        from lib.models.unet import UNet

        def run(x):
            return UNet()(x).tolist()
        """
        for i in range(12)
    },
}


def test_configured_entries_are_found_by_their_module_and_nothing_else_is_parsed(tmp_path, monkeypatch):
    from .helpers import write_project

    write_project(tmp_path, LIBRARY)
    monkeypatch.chdir(tmp_path)
    files, _ = discover([Path(".")], Config(root=tmp_path).excludes, tmp_path)
    config = Config(root=tmp_path, captured=["lib.models.unet.UNet.forward", "Block.forward", "lib.ops.fused_step"])
    fast = check_files(files, config)
    assert [(f.path, f.line, f.code) for f in fast.findings] == [
        ("lib/layers.py", 5, "CG102"),
        ("lib/models/unet.py", 6, "CG101"),
        ("lib/ops.py", 2, "CG105"),
    ]
    assert fast.findings == check_files(files, config, prefilter=False).findings
    # The other models' forwards and the pipelines that name UNet are never parsed.
    read = {p.relative_to(tmp_path.resolve()).as_posix() for p in fast.footprint.read}
    assert read == {"lib/__init__.py", "lib/models/unet.py", "lib/layers.py", "lib/ops.py"}


def test_the_byte_scan_knows_every_compile_form_the_engine_recognises():
    from cglint import vocabulary
    from cglint.engine.prefilter import CAPTURE_TOKENS

    forms = ("capture.cudagraph_modes", "capture.cudagraph_backends", "capture.cudagraph_options")
    for word in frozenset().union(*(vocabulary.names(form) for form in forms)):
        assert {f'"{word}"', f"'{word}'"} <= CAPTURE_TOKENS, word


def test_compile_options_count_as_string_literals_only(tmp_path, monkeypatch):
    from .helpers import write_project

    write_project(tmp_path, {
        # An inductor-style configuration module: says cudagraphs, compiles nothing.
        "settings.py": "import config\n\nconfig.triton.cudagraphs = True\nuse_cudagraphs = config.triton.cudagraphs\n",
        "serve.py": """
            import torch

            def build(model):
                return torch.compile(model, options={'triton.cudagraphs': True})

            def step(model, x):
                return build(model)(x)
            """,
    })
    monkeypatch.chdir(tmp_path)
    files, _ = discover([Path(".")], Config(root=tmp_path).excludes, tmp_path)
    result = check_files(files, Config(root=tmp_path))
    assert {p.name for p in result.footprint.read} == {"serve.py"}


def test_every_capture_token_holds_an_anchor_of_the_fast_scan():
    from cglint.engine import prefilter

    for token in prefilter.CAPTURE_TOKENS:
        assert any(anchor in token for anchor in prefilter._ANCHORS), token
        assert prefilter.can_capture(f"x = ({token})\n"), token
    assert not prefilter.can_capture('HEADERS = ["c10/cuda/CUDAGraphsC10Utils.h"]\nmode = CUDAGraphMode.FULL\n')
    assert prefilter.can_capture("from torch.cuda import CUDAGraph\n")


def test_a_file_that_names_capture_forms_only_in_strings_and_comments_is_not_parsed(tmp_path, monkeypatch):
    from cglint.engine import checker, prefilter

    from .helpers import write_project

    assert checker.CAPTURE_NAMES <= prefilter._CODE_NAMES  # every name discovery walks for
    write_project(tmp_path, {
        # torch's own docs and tracing rules: capture words in strings, no capture.
        "docs.py": '''
            """Use torch.cuda.graph(g) to capture; see CUDAGraph.replay()."""
            RULES = {"torch.cuda.graphs.make_graphed_callables": "skip"}  # capture_begin
            ''',
        "runner.py": """
            import torch

            def graphed_step(step, x):
                g = torch.cuda.CUDAGraph()
                with torch.cuda.graph(g):
                    step(x).item()
            """,
        # A capture word in a comment and a syntax error: parsed, and the error reported.
        "broken.py": "# torch.cuda.graph\ndef f(:\n",
    })
    monkeypatch.chdir(tmp_path)
    files, _ = discover([Path(".")], Config(root=tmp_path).excludes, tmp_path)
    result = check_files(files, Config(root=tmp_path))
    assert {p.name for p in result.footprint.read} == {"runner.py", "broken.py"}
    assert [(f.path, f.code) for f in result.findings] == [("broken.py", "CG002"), ("runner.py", "CG101")]
    assert result.findings == check_files(files, Config(root=tmp_path), prefilter=False).findings


def test_a_helper_is_mentioned_only_as_a_whole_word():
    from cglint.engine.prefilter import names_word

    helpers = ["_record", "capture_step"]
    # torch's profiler says `_record_function` in hundreds of files that never call `_record`.
    assert not names_word("with _record_function('step'):\n    my_record = 1\n", helpers)
    assert names_word("with _record_function('x'):\n    self._record(g)\n", helpers)  # the second occurrence
    assert names_word("_record", helpers) and names_word("x = capture_step", helpers)  # at either end
    assert not names_word("recapture_steps()", helpers) and not names_word("anything", [])
    assert names_word("λ=_record(g)", helpers) and not names_word("é_record", helpers)  # identifiers are Unicode


def test_names_most_files_mention_are_left_out_of_the_second_scan():
    # SGLang's `replay()`, `wrapper()`, `launch()`: hundreds of files say them, and reading each
    # caller doubled the run; a name a few files mention (`capture_or_run`) is still scanned for.
    from cglint.check import _SCAN_LIMIT, _distinctive

    texts = {f"f{i}.py": f"def f{i}():\n    return replay(x)\n" for i in range(_SCAN_LIMIT + 1)}
    texts |= {"runner.py": "runner.capture_or_run(batch)\n", "other.py": "x = replayed + 1\n"}
    assert _distinctive({"replay", "capture_or_run"}, texts) == ({"capture_or_run"}, ["runner.py"])
    few = dict(list(texts.items())[:_SCAN_LIMIT])
    assert _distinctive({"replay"}, few) == ({"replay"}, list(few))


def test_a_search_inside_an_earlier_ones_files_finds_what_a_full_scan_finds(tmp_path):
    # "Model(" is looked for among the files an earlier search for "Model" found, and "Model"
    # after "Model(" reads every file again: each answer is the full scan's.
    from cglint.engine.project import Project

    texts = {
        "a.py": "class Model:\n    pass\n",
        "b.py": "from a import Model\nm = Model()\n",
        "c.py": "x = SubModel()\n",
        "d.py": "y = 1\n",
    }
    sources = {tmp_path / name: text for name, text in texts.items()}
    for path, text in sources.items():
        path.write_text(text)
    project = Project(str, lambda *a: None, sources=sources)
    project.add_root(tmp_path)
    for text in ("Model(", "Model", "SubModel(", "Model()", "y"):
        found = {module.file.path.name for module in project.modules_mentioning(text, limit=10)}
        assert found == {path.name for path, source in sources.items() if text in source}, text
