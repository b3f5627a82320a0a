"""Speed and memory of `cglint check` against the libcst parse-everything floor.

Run on demand (not part of the test suite):

    python bench/bench.py fixtures torch megatron-core [--equivalence]

For each tree, in one run: (a) parsing every file with libcst in one process (what a
naive libcst linter pays at least), (b) a cold `cglint check --no-cache`, (c) a warm
`cglint check` (cache filled by a first run), then again after editing one file without
a capture, (d) `cglint check` on one small file without and with a capture; wall time
and peak memory of each, as processes. Every tree is measured in a scratch copy: `torch`
is the installed package's Python sources (found without importing torch),
`megatron-core` is fetched with `pip download --no-deps` (nothing is kept).
`--equivalence` also compares the findings with a run that parses every file.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

MEGATRON = "megatron-core==0.16.1"
FLOOR = """
import sys, libcst
from pathlib import Path
for path in sorted(Path(sys.argv[1]).rglob("*.py")):
    try:
        libcst.parse_module(path.read_bytes())
    except Exception:
        pass
"""
EQUIVALENCE = """
import json, sys
from pathlib import Path
from cglint.check import check_files
from cglint.config import Config
from cglint.discovery import discover
root = Path(sys.argv[1]).resolve()
files, _ = discover([root], Config(root=root).excludes, root)
fast = check_files(files, Config(root=root))
full = check_files(files, Config(root=root), prefilter=False)
print(json.dumps({"equal": fast.findings == full.findings, "findings": len(fast.findings)}))
"""


def measure(command: list[str], cwd: Path) -> tuple[float, float]:
    """(wall seconds, peak resident MiB) of one process."""
    start = time.perf_counter()
    process = subprocess.Popen(command, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, _, usage = os.wait4(process.pid, 0)
    return time.perf_counter() - start, usage.ru_maxrss / 1024


def tree_of(name: str, scratch: Path) -> Path:
    if name == "torch":
        spec = importlib.util.find_spec("torch")
        if spec is None or not spec.submodule_search_locations:
            raise SystemExit("torch is not installed")
        # Copied out of the environment: a project configuration above an environment
        # inside a project (`.venv` excluded) would otherwise apply to it.
        installed = Path(list(spec.submodule_search_locations)[0])
        target = scratch / "torch-sources" / "torch"
        for path in installed.rglob("*.py"):
            copy = target / path.relative_to(installed)
            copy.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, copy)
        return target
    if name == "megatron-core":
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", str(scratch), MEGATRON], check=True)
        wheel = next(scratch.glob("megatron_core-*.whl"))
        target = scratch / "megatron-core"
        with zipfile.ZipFile(wheel) as archive:
            archive.extractall(target)
        return target / "megatron"
    target = scratch / "copies" / Path(name).name  # copied: the benchmark edits a file
    shutil.copytree(Path(name).resolve(), target, ignore=shutil.ignore_patterns(".cglint_cache", "__pycache__"))
    return target


def small_files(tree: Path) -> tuple[Path, Path]:
    """A small file without any capture form, and a small one with a capture."""
    from cglint.engine.prefilter import can_capture

    plain = capture = None
    for path in sorted(tree.rglob("*.py")):
        text = path.read_text("utf-8", errors="replace")
        if 20 < text.count("\n") < 300:
            if plain is None and not can_capture(text) and path.name != "__init__.py":
                plain = path
            if capture is None and "cuda.graph(" in text:
                capture = path
    return plain, capture


def bench(name: str, scratch: Path, equivalence: bool) -> list[str]:
    tree = tree_of(name, scratch)
    files = list(tree.rglob("*.py"))
    lines = sum(p.read_bytes().count(b"\n") for p in files)
    cglint = [sys.executable, "-m", "cglint", "check", "--exit-zero", "--format", "concise"]
    work = Path(tempfile.mkdtemp(dir=scratch))  # the cache lives here, not in the measured tree
    floor, floor_mem = measure([sys.executable, "-c", FLOOR, str(tree)], work)
    cold, cold_mem = measure([*cglint, "--no-cache", str(tree)], work)
    measure([*cglint, str(tree)], work)  # fills the cache
    warm, warm_mem = measure([*cglint, str(tree)], work)
    report = subprocess.run([*cglint[:-2], "--format", "json", str(tree)], cwd=work, capture_output=True, text=True)
    checked = json.loads(report.stdout)["files_checked"]
    if checked != len(files):  # an excluded tree would look very fast
        raise SystemExit(f"{name}: cglint checked {checked} of {len(files)} files")
    plain, capture = small_files(tree)
    edited = float("nan")
    if plain:  # the usual edit: a file without a capture, which the previous run's engine did not read
        with open(plain, "a", encoding="utf-8") as stream:
            stream.write("\n# edited\n")
        edited = measure([*cglint, str(tree)], work)[0]
    one_plain = measure([*cglint, "--no-cache", str(plain)], work)[0] if plain else float("nan")
    one_capture = measure([*cglint, "--no-cache", str(capture)], work)[0] if capture else float("nan")
    row = (
        f"| {name} | {len(files):,} | {lines:,} | {floor:.1f} s | {cold:.1f} s ({cold / floor:.2f}x) | "
        f"{warm:.2f} s ({warm / floor:.3f}x) | {edited:.2f} s | {one_plain * 1000:.0f} ms | {one_capture * 1000:.0f} ms | "
        f"{max(cold_mem, warm_mem):.0f} MiB |"
    )
    out = [row]
    if equivalence:
        done = subprocess.run([sys.executable, "-c", EQUIVALENCE, str(tree)], cwd=work, capture_output=True, text=True)
        out.append(f"<!-- {name} equivalence with a full parse: {done.stdout.strip() or done.stderr.strip()[-200:]} -->")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trees", nargs="+", help="fixtures, torch, megatron-core, or a folder")
    parser.add_argument("--equivalence", action="store_true")
    args = parser.parse_args()
    print(f"Machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}")
    print()
    print("| tree | files | lines | libcst parse floor (1 process) | cold check | warm check | warm, one file edited | one file, no capture | one file, capture | peak memory |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    # cglint's modules as `pip install` leaves them, compiled to bytecode: a source checkout
    # under PYTHONDONTWRITEBYTECODE would otherwise compile them again in every process.
    package = Path(__file__).resolve().parent.parent
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(package / "cglint"), str(package / "rules")], check=True, stdout=subprocess.DEVNULL)
    with tempfile.TemporaryDirectory() as scratch:
        for name in args.trees:
            for line in bench(name, Path(scratch), args.equivalence):
                print(line, flush=True)


if __name__ == "__main__":
    main()
