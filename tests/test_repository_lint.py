"""The repository's own checks pass: ruff on the code, mypy on the package, and cglint on
its own sources, as `.pre-commit-config.yaml` runs them. CI gets ruff and mypy from the
`test` extra (pinned as in the `lint` extra), so a new finding fails CI; where a tool is not
installed (mypy needs Python 3.10+, and torch and pygls to check the verifier and the editor
server against), its test is skipped."""
from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _run(*command: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", *command], cwd=ROOT, capture_output=True, text=True, timeout=600)


def _needs(module: str) -> None:
    if importlib.util.find_spec(module) is None:
        pytest.skip(f"{module} is not installed (pip install -e '.[lint,verify,server]')")


def test_ruff_finds_nothing():
    _needs("ruff")
    done = _run("ruff", "check", "--no-cache", "cglint", "tests", "bench", "rules")
    assert done.returncode == 0, done.stdout + done.stderr


def test_mypy_finds_nothing():
    _needs("mypy")
    _needs("torch")  # what the verifier is checked against; without it mypy reports other things
    _needs("pygls")
    done = _run("mypy")  # the files and settings of [tool.mypy] in pyproject.toml
    assert done.returncode == 0, done.stdout + done.stderr


def test_cglint_finds_nothing_in_its_own_sources():
    done = _run("cglint", "check", "--no-cache", "cglint", "rules")
    assert done.returncode == 0, done.stdout + done.stderr
