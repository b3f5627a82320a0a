"""Fetch pinned real projects as trees of their `.py` files and run cglint on them (shared by
bench/scan.py and bench/realworld/run.py).

A project is fetched with `pip download --no-deps` into a scratch folder and only the `.py`
files of the wheel or sdist are unpacked (nothing else of its code is kept). Specs:

- `{"requirement": "vllm==0.33.0"}`: a PyPI wheel or sdist; `pip-args` adds arguments (an
  sdist whose build setup imports torch needs `--no-build-isolation`) and `env` environment
  variables (the switches that skip a CUDA build while pip prepares the sdist's metadata);
- `{"installed": "torch", "version": "2.13.0"}`: the installed package's sources when the
  version matches, else downloaded like the others;
- `{"stdlib": True, "version": "3.11.7"}`: the running interpreter's standard library.

A tree already in the scratch folder is reused, so a kept scratch folder is a cache.
`run_cglint` checks a tree in a child process, with a configuration written for that run.
"""
from __future__ import annotations

import importlib.metadata
import json
import importlib.util
import os
import platform
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import tempfile
import time
import zipfile
from pathlib import Path


class FetchError(Exception):
    """A project could not be had."""


class CheckError(Exception):
    """cglint failed on a tree (crashed, exited with status 2, wrote no JSON)."""


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def unpack_py(archive: Path, target: Path) -> None:
    """Only the .py files of a wheel or an sdist, never outside `target`."""
    target.mkdir(parents=True, exist_ok=True)
    if archive.suffix == ".whl" or archive.suffix == ".zip":
        with zipfile.ZipFile(archive) as zf:
            for name in zf.namelist():
                if name.endswith(".py"):
                    zf.extract(name, target)  # zipfile drops absolute parts and `..`
        return
    with tarfile.open(archive) as tf:
        members = [m for m in tf.getmembers() if m.isfile() and m.name.endswith(".py")]
        safe = [m for m in members if not m.name.startswith("/") and ".." not in Path(m.name).parts]
        if hasattr(tarfile, "data_filter"):
            tf.extractall(target, members=safe, filter="data")
        else:  # pragma: no cover - Python without extraction filters
            tf.extractall(target, members=safe)
    # An sdist holds one top folder (name-version/): scan paths are relative to inside it.
    tops = [p for p in target.iterdir() if p.is_dir()]
    if len(tops) == 1 and not (target / "setup.py").exists():
        for item in tops[0].iterdir():
            shutil.move(str(item), target / item.name)
        tops[0].rmdir()


def copy_py(source: Path, target: Path) -> None:
    """The .py files below `source` (no caches, no installed third-party packages)."""
    skip = {"__pycache__", "site-packages", "dist-packages"}
    for folder, dirs, files in os.walk(source):
        dirs[:] = sorted(d for d in dirs if d not in skip)
        relative = Path(folder).relative_to(source)
        for name in files:
            if name.endswith(".py"):
                destination = target / relative / name
                destination.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(Path(folder) / name, destination)


def pip_download(requirement: str, scratch: Path, pip_args: tuple = (), env: dict | None = None) -> Path:
    folder = scratch / "downloads" / requirement.replace("=", "-")
    folder.mkdir(parents=True, exist_ok=True)
    archives = sorted(p for p in folder.iterdir() if p.name.endswith((".whl", ".tar.gz", ".zip", ".tgz")))
    if archives:
        return archives[0]
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "--disable-pip-version-check",
               *pip_args, "-d", str(folder), requirement]
    done = subprocess.run(command, capture_output=True, text=True, env={**os.environ, **(env or {})})
    archives = sorted(p for p in folder.iterdir() if p.name.endswith((".whl", ".tar.gz", ".zip", ".tgz")))
    if done.returncode != 0 or not archives:
        tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
        raise FetchError(f"pip download {requirement} failed: {' / '.join(tail) or 'no archive'}")
    return archives[0]


def fetch(name: str, spec: dict, scratch: Path) -> Path:
    """The folder the project's scan paths are relative to."""
    tree = scratch / "trees" / name
    if tree.exists():
        return tree
    if spec.get("stdlib"):
        version = platform.python_version()
        if version != spec["version"]:
            raise FetchError(f"the baseline scans the standard library of Python {spec['version']}; this is Python {version}")
        copy_py(Path(sysconfig.get_paths()["stdlib"]), tree / "Lib")
        return tree
    if "installed" in spec:
        package = spec["installed"]
        try:
            version = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            version = None
        found = importlib.util.find_spec(package) if version else None
        if version and version.split("+")[0] == spec["version"] and found and found.submodule_search_locations:
            copy_py(Path(list(found.submodule_search_locations)[0]), tree / package)
            return tree
        log(f"  {package} {spec['version']} is not installed here ({version or 'none'}): downloading it")
        spec = dict(spec, requirement=f"{package}=={spec['version']}")
    archive = pip_download(spec["requirement"], scratch, tuple(spec.get("pip-args", ())), spec.get("env"))
    partial = tree.with_name(tree.name + ".partial")  # an interrupted unpack is never taken for a tree
    shutil.rmtree(partial, ignore_errors=True)
    unpack_py(archive, partial)
    partial.rename(tree)
    return tree


def run_cglint(tree: Path, paths: list, config: dict, report: Path | None = None, subcommand: tuple = ("check", "--exit-zero", "--no-cache")) -> tuple[dict, float, float]:
    """cglint's JSON report on `paths` of `tree` with `config` ([tool.cglint] keys), the wall
    seconds and the peak resident MiB of the cglint process with its workers. `report`: a
    file to keep the JSON report in; `subcommand`: `check` by default, or `("reach",)`. The
    cglint imported is the one of this checkout."""
    settings = tree / "cglint.toml"  # this run's own configuration (and none from above the tree)
    settings.write_text("".join(f"{key} = {json.dumps(value)}\n" for key, value in config.items()), encoding="utf-8")
    command = [sys.executable, "-m", "cglint", *subcommand, "--format", "json", "--config", str(settings), *paths]
    repo = str(Path(__file__).resolve().parent.parent)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [repo, os.environ.get("PYTHONPATH")])))
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        start = time.perf_counter()
        process = subprocess.Popen(command, cwd=tree, stdout=out, stderr=err, env=env)
        # wait4 gives this child's own peak (with its waited-for workers), not the largest of all runs.
        _, status, usage = os.wait4(process.pid, 0)
        seconds = time.perf_counter() - start
        process.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read().decode("utf-8", "replace"), err.read().decode("utf-8", "replace")
    if process.returncode != 0:
        raise CheckError(f"cglint exited with status {process.returncode}: {stderr.strip()[-2000:]}")
    try:
        data = json.loads(stdout)
    except ValueError:
        raise CheckError(f"cglint wrote no JSON report: {stdout[:200]!r} {stderr.strip()[-1000:]}") from None
    if report is not None:
        report.parent.mkdir(parents=True, exist_ok=True)
        report.write_text(json.dumps(data, indent=1), encoding="utf-8")
    return data, seconds, usage.ru_maxrss / 1024
