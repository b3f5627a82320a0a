"""The packaging metadata is in its current form: building it prints no warning (CI's
`pip install -e .` once printed setuptools' deprecation of the `project.license` table three
times)."""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ("pyproject.toml", "README.md", "LICENSE", "cglint", "rules")


def test_building_the_metadata_warns_of_nothing(tmp_path):
    setuptools = pytest.importorskip("setuptools")
    if int(setuptools.__version__.split(".")[0]) < 77:  # what pyproject.toml's build-system requires
        pytest.skip(f"setuptools {setuptools.__version__} predates SPDX license expressions")
    source = tmp_path / "cglint"  # a copy: setuptools writes its egg-info beside the sources
    source.mkdir()
    for name in PACKAGE:
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, source / name, ignore=shutil.ignore_patterns("__pycache__", ".cglint_cache"))
        else:
            shutil.copy2(ROOT / name, source / name)
    build = "import sys; from setuptools import build_meta; print(build_meta.prepare_metadata_for_build_wheel(sys.argv[1]))"
    done = subprocess.run([sys.executable, "-W", "always", "-c", build, str(tmp_path)], cwd=source, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "Warning" not in done.stderr + done.stdout, done.stderr
    metadata = (tmp_path / done.stdout.split()[-1] / "METADATA").read_text("utf-8").splitlines()
    assert [line for line in metadata if line.startswith("License")] == ["License-Expression: Apache-2.0", "License-File: LICENSE"]
