"""Silent divergence (tests/data/divergence): host state a capture froze and the program
changes between replays, in the shapes real code has: a setter called in the replay loop,
`eval()` after capture, a flag flipped over `modules()`, a global set through `global` in
another module, an offset that advances, a loop bound set by a method. Every marked line is
reported and nothing else; the clean program keeps its state in a device tensor."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from cglint.check import check_paths
from cglint.config import Config
from cglint.selection import Selection

from .helpers import by_file, expected_markers

CASES = Path(__file__).resolve().parent / "data" / "divergence"
SELECT = ["control-flow", "frozen-scalar", "dynamic-shape", "realloc"]


def _expected(root: Path, base: Path = CASES) -> set:
    paths = [root] if root.is_file() else sorted(root.rglob("*.py"))
    base = base if root.is_file() else root
    return {(p.relative_to(base).as_posix(), code, line) for p in paths for code, line in expected_markers(p.read_text("utf-8"))}


@pytest.mark.parametrize("case", sorted(p.name for p in CASES.iterdir() if p.suffix == ".py" or p.is_dir()))
def test_divergence_is_located_at_its_line(case):
    root = CASES / case
    config = Config(root=root if root.is_dir() else CASES)
    found = check_paths([root], config, Selection.of(config, select=SELECT)).findings
    assert by_file(found, root if root.is_dir() else CASES) == _expected(root)


def test_a_folder_of_scripts_is_checked_as_separate_programs():
    # One script's `net.eval()` after its capture changes no other script's model: checked as
    # a folder, clean_eval_before_capture.py was flagged through train_eval.py's eval().
    config = Config(root=CASES)
    found = check_paths([CASES], config, Selection.of(config, select=SELECT)).findings
    assert by_file(found, CASES) == _expected(CASES)


CONFIRMED = Path(__file__).resolve().parent / "data" / "gpu_confirmed"


@pytest.mark.parametrize("case", sorted(p.name for p in CONFIRMED.glob("*.py")))
def test_gpu_confirmed_program_gets_exactly_its_finding(case):
    # Every rule a user gets by default: the hazard is reported at its line, and nothing else,
    # on each program (the correct ones give nothing).
    config = Config(root=CONFIRMED)
    found = check_paths([CONFIRMED / case], config, Selection.of(config)).findings
    assert by_file(found, CONFIRMED) == _expected(CONFIRMED / case, CONFIRMED)


def test_graphs_sharing_a_pool_keep_only_the_last_output(tmp_path):
    # A serving engine's capture loop: one graph per batch size, one shared pool, and the output
    # bound to one name. Replaying the bs=4 graph updates an output no name holds, and the
    # dropped outputs' memory goes back to the pool for the next capture.
    (tmp_path / "engine.py").write_text(
        "import torch\n"
        "\n"
        "class Runner:\n"
        "    def __init__(self, model, max_bs=8):\n"
        "        self.model = model\n"
        "        self.static_x = torch.zeros(max_bs, 64, device='cuda')\n"
        "        self.pool = torch.cuda.graph_pool_handle()\n"
        "        self.graphs = {}\n"
        "\n"
        "    def capture_all(self):\n"
        "        for bs in (8, 4, 2, 1):\n"
        "            self.graphs[bs] = torch.cuda.CUDAGraph()\n"
        "            with torch.cuda.graph(self.graphs[bs], pool=self.pool):\n"
        "                self.static_out = self.model(self.static_x[:bs])\n"
        "                logits = self.static_out.float()  # a temporary of the block\n"
        "\n"
        "    def run(self, x):\n"
        "        bs = x.shape[0]\n"
        "        self.static_x[:bs].copy_(x)\n"
        "        self.graphs[bs].replay()\n"
        "        return self.static_out[:bs]\n",
        encoding="utf-8",
    )
    config = Config(root=tmp_path)
    found = check_paths([tmp_path], config, Selection.of(config, select=["CG958"])).findings
    assert {(f.code, f.line) for f in found} == {("CG958", 14)}


def test_closure_variable_set_through_nonlocal_between_replays(tmp_path):
    # A factory returns the captured sampler and its setter; the setter rebinds the closure's
    # `temperature` with `nonlocal` between replays. The clean twin keeps it in a device tensor.
    (tmp_path / "sampling.py").write_text(
        "import torch\n"
        "\n"
        "def make_sampler(model, temperature, scale):\n"
        "    def set_temperature(t):\n"
        "        nonlocal temperature\n"
        "        temperature = t\n"
        "\n"
        "    def set_scale(s):\n"
        "        scale.fill_(s)\n"
        "\n"
        "    def sample(x):\n"
        "        logits = model(x) * scale\n"
        "        return torch.softmax(logits / temperature, dim=-1)\n"
        "\n"
        "    return sample, set_temperature, set_scale\n",
        encoding="utf-8",
    )
    (tmp_path / "serve.py").write_text(
        "import torch\n"
        "from sampling import make_sampler\n"
        "\n"
        "model = torch.nn.Linear(16, 16).cuda()\n"
        "scale = torch.ones((), device='cuda')\n"
        "sample, set_temperature, set_scale = make_sampler(model, 1.0, scale)\n"
        "static_x = torch.randn(4, 16, device='cuda')\n"
        "sample(static_x)\n"
        "g = torch.cuda.CUDAGraph()\n"
        "with torch.cuda.graph(g):\n"
        "    probs = sample(static_x)\n"
        "for t in (0.5, 2.0):\n"
        "    set_temperature(t)\n"
        "    set_scale(t)\n"
        "    g.replay()\n",
        encoding="utf-8",
    )
    config = Config(root=tmp_path)
    found = check_paths([tmp_path], config, Selection.of(config, select=SELECT)).findings
    assert by_file(found, tmp_path) == {("sampling.py", "CG601", 13)}


def test_a_runner_call_matched_by_name_keeps_its_writes_to_its_own_script(tmp_path):
    # A call spelled like a graph runner's replaying method (`engine.run(...)`) is matched by
    # name to find kept outputs. That match is too loose to make the caller a replay loop
    # whose writes change state: checked as one tree, the serving fixture's `main()`, which
    # sets `Decoder().cuda().eval()` before it captures, was taken to change `self.training`
    # between replays of the training fixture's classifier graph.
    fixtures = Path(__file__).resolve().parent.parent / "fixtures"
    for name in ("serving_streams", "training_step"):
        shutil.copytree(fixtures / name, tmp_path / name)
    config = Config(root=tmp_path)
    found = check_paths([tmp_path], config, Selection.of(config, select=("CG601",))).findings
    assert {(path, code) for path, code, _ in by_file(found, tmp_path)} == {("serving_streams/server/model.py", "CG601")}
