"""The pre-commit hook this repository publishes, run by the real pre-commit on a throwaway
git repository with the README's `.pre-commit-config.yaml` snippet. pre-commit installs the
hook from a git snapshot of this working tree, tagged as the README says releases are, with
pip (which needs the package index for cglint's dependencies)."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from .helpers import write_project

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ("pyproject.toml", "README.md", "LICENSE", ".pre-commit-hooks.yaml", "cglint", "rules")
OFFLINE = re.compile(r"NewConnectionError|Temporary failure in name resolution|Network is unreachable|No matching distribution found|Could not find a version")

MODEL = """
import torch


def step(x):
    scale = x.abs().max().item()
    return x / scale
"""
RUN = """
import torch

from app.model import step

g = torch.cuda.CUDAGraph()
with torch.cuda.graph(g):
    out = step(static_x)
"""


def test_hook_definition():
    yaml = pytest.importorskip("yaml")
    (hook,) = yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text())
    assert hook["id"] == "cglint" and hook["language"] == "python" and hook["types"] == ["python"]
    assert hook["entry"].split()[:2] == ["cglint", "check"]


def _git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", "-c", "user.name=cglint tests", "-c", "user.email=tests@cglint.invalid", "-c", "commit.gpgsign=false", *args],
                   cwd=cwd, check=True, capture_output=True)


@pytest.fixture
def hook_repo(tmp_path):
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    pytest.importorskip("pre_commit")
    snapshot = tmp_path / "cglint-hook"
    snapshot.mkdir()
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", ".cglint_cache")
    for name in PACKAGE:
        source = ROOT / name
        if source.is_dir():
            shutil.copytree(source, snapshot / name, ignore=ignore)
        else:
            shutil.copy2(source, snapshot / name)
    _git(snapshot, "init", "-q")
    _git(snapshot, "add", "-A")
    _git(snapshot, "commit", "-q", "-m", "snapshot")
    return snapshot


def readme_config() -> str:
    """The README's `.pre-commit-config.yaml` snippet."""
    readme = (ROOT / "README.md").read_text("utf-8")
    return next(b for b in re.findall(r"```yaml\n(.*?)```", readme, re.S) if b.startswith("repos:"))


def _install_readme_config(hook_repo: Path, project: Path) -> None:
    """The README's snippet, pointing at the snapshot instead of <your-org>'s repository, and
    at the snapshot's commit instead of the README's (a commit of this repository's history,
    tested below)."""
    config = readme_config()
    rev = re.search(r"rev: (\S+)", config)[1]
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=hook_repo, check=True, capture_output=True, text=True).stdout.strip()
    config = config.replace(f"rev: {rev}", f"rev: {head}")
    (project / ".pre-commit-config.yaml").write_text(re.sub(r"repo: \S+", f"repo: {hook_repo.as_uri()}", config))


def _run_hook(hook_repo: Path, project: Path, *files: str) -> subprocess.CompletedProcess:
    home = project.parent / "pre-commit-home"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GIT_", "PRE_COMMIT"))}
    env.update(PRE_COMMIT_HOME=str(home), PRE_COMMIT_COLOR="never", NO_COLOR="1")
    done = subprocess.run(
        [sys.executable, "-m", "pre_commit", "run", "cglint", "--verbose", "--files", *files],
        cwd=project, env=env, capture_output=True, text=True, timeout=540,
    )
    if done.returncode not in (0, 1) or "An unexpected error has occurred" in done.stdout + done.stderr:
        log = home / "pre-commit.log"
        text = done.stdout + done.stderr + (log.read_text(errors="replace") if log.exists() else "")
        if OFFLINE.search(text):
            pytest.skip("pre-commit could not install the hook's dependencies (no package index)")
        pytest.fail(f"pre-commit failed to run:\n{text[-4000:]}")
    return done


def test_precommit_hook_fails_on_a_hazard_then_passes_once_fixed(hook_repo, tmp_path):
    project = tmp_path / "project"
    write_project(project, {"app/__init__.py": "", "app/model.py": MODEL, "app/run.py": RUN})
    _install_readme_config(hook_repo, project)
    _git(project, "init", "-q")
    _git(project, "add", "-A")

    # Only run.py is handed to the hook, as when it alone changed: the checker still reads
    # app/model.py, which the capture calls, and reports the hazard there.
    done = _run_hook(hook_repo, project, "app/run.py")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "app/model.py:5:13: CG101 [error]" in done.stdout
    assert "captured: app/run.py:6 with torch.cuda.graph(g)" in done.stdout

    (project / "app/model.py").write_text(MODEL.replace("x.abs().max().item()", "x.abs().max()"))
    _git(project, "add", "-A")
    done = _run_hook(hook_repo, project, "app/run.py", "app/model.py")
    assert done.returncode == 0, done.stdout + done.stderr
    assert re.search(r"cglint.*Passed", done.stdout)


def test_a_file_handed_over_alone_still_reads_the_modules_it_calls(tmp_path, monkeypatch, capsys):
    import json

    from cglint.cli import main

    write_project(tmp_path, {"app/__init__.py": "", "app/model.py": MODEL, "app/run.py": RUN})
    monkeypatch.chdir(tmp_path / "app")  # pre-commit runs from the repository root; any folder works
    assert main(["check", "--no-cache", "--format", "json", "run.py"]) == 1
    data = json.loads(capsys.readouterr().out)
    assert data["files_checked"] == 1
    assert [(f["path"], f["line"], f["code"]) for f in data["findings"]] == [("model.py", 5, "CG101")]


def _repository_git(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True)


def test_the_readme_pins_a_commit_of_this_repository_that_has_the_hook():
    """pre-commit fetches the `rev` the README names: a tag this repository does not have
    failed with "pathspec did not match". The README pins a full commit hash, which must be a
    commit of this repository's history that carries .pre-commit-hooks.yaml; the pip URLs
    pin the same one."""
    rev = re.search(r"rev: (\S+)", readme_config())[1]
    assert re.fullmatch(r"[0-9a-f]{40}", rev), f"rev {rev!r} is not a full commit hash"
    readme = (ROOT / "README.md").read_text("utf-8")
    pins = set(re.findall(r"git\+https://github\.com/<your-org>/cglint@(\S+?)[\"\s]", readme))
    assert pins == {rev}
    for doc in sorted((ROOT / "docs").glob("*.md")):
        assert set(re.findall(r"git\+https://github\.com/<your-org>/cglint@(\S+?)[\"\s]", doc.read_text("utf-8"))) <= {rev}, doc.name
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    head = _repository_git("rev-parse", "--verify", "HEAD")
    if head.returncode != 0:
        pytest.skip("this checkout has no git history")
    if _repository_git("cat-file", "-e", f"{rev}^{{commit}}").returncode != 0:
        if _repository_git("rev-parse", "--is-shallow-repository").stdout.strip() == "true":
            pytest.skip("a shallow checkout: the pinned commit may lie beyond its history")
        pytest.fail(f"the README pins {rev}, which is no commit of this repository")
    assert _repository_git("merge-base", "--is-ancestor", rev, "HEAD").returncode == 0, f"{rev} is not in the history of HEAD"
    assert _repository_git("cat-file", "-e", f"{rev}:.pre-commit-hooks.yaml").returncode == 0, f"{rev} has no .pre-commit-hooks.yaml"


def test_readme_snippets_for_pre_commit_and_github_actions_parse():
    yaml = pytest.importorskip("yaml")
    readme = (ROOT / "README.md").read_text("utf-8")
    blocks = [yaml.safe_load(b) for b in re.findall(r"```yaml\n(.*?)```", readme, re.S)]
    hooks = [h for b in blocks if isinstance(b, dict) for r in b.get("repos", []) for h in r["hooks"]]
    assert [h["id"] for h in hooks] == ["cglint"]
    workflow = next(b for b in blocks if isinstance(b, dict) and "jobs" in b)
    steps = [s for job in workflow["jobs"].values() for s in job["steps"]]
    runs = " ".join(s.get("run", "") for s in steps)
    assert "cglint check --format github" in runs and "--format sarif" in runs and "cglint verify" in runs
    assert any(s.get("uses", "").startswith("github/codeql-action/upload-sarif") for s in steps)
