"""Speed and memory of `cglint check` against ruff with every rule, and against the libcst
parse-everything floor.

Run on demand (not part of the test suite; ruff comes from the package index:
`pip install ruff` in the same environment):

    python bench/bench.py torch megatron-core diffusers vllm-repo [--repeat 3] [--equivalence] [--floor]

For each tree, in one run: (a) `ruff check --select ALL --output-format concise
--no-cache` and a cold `cglint check --no-cache`, alternated `--repeat` times (the medians
and their ratio are reported: on a shared machine both see the same load), (b) a warm
`cglint check` (cache filled by a first run), then again after editing one file without a
capture, (c) `cglint check` on one small file without and with a capture; wall time and
peak memory of each, as processes. `--floor` adds parsing every file with libcst in one
process (what a naive libcst linter pays at least). Every tree is measured in a scratch
copy: `torch` is the installed package's Python sources (found without importing torch),
`megatron-core` and `diffusers` are fetched with `pip download --no-deps` (nothing is
kept). `vllm-repo` is a whole repository (package, tests, examples, benchmarks: what
`cglint check .` meets at a project's root): vLLM's sdist, which holds its git tree's files;
pip prepares its metadata without building, which needs setuptools-scm and setuptools-rust
in this environment (`pip install setuptools-scm setuptools-rust`). `--equivalence` also
compares the findings with a run that parses every file.
"""
from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

# Packages fetched from the index: the wheel's top-level package is the tree.
WHEELS = {"megatron-core": ("megatron-core==0.16.1", "megatron"), "diffusers": ("diffusers==0.42.1", "diffusers")}
# Whole repositories, from sdists that hold the git tree (setuptools-scm): requirement, and the
# environment that lets pip prepare the metadata without a CUDA build (and with the version
# the index gives, not a local `+empty` one).
SDISTS = {"vllm-repo": ("vllm==0.33.0", {"VLLM_TARGET_DEVICE": "empty", "VLLM_VERSION_OVERRIDE": "0.33.0"})}
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
    if name in WHEELS:
        requirement, package = WHEELS[name]
        folder = scratch / "wheels" / name
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", str(folder), requirement], check=True)
        target = scratch / name
        with zipfile.ZipFile(next(folder.glob("*.whl"))) as archive:
            archive.extractall(target)
        return target / package
    if name in SDISTS:
        from fetching import unpack_py  # bench/fetching.py: the .py files only, inside the sdist's folder

        requirement, env = SDISTS[name]
        folder = scratch / "sdists" / name
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:", "--no-build-isolation", "-q", "-d", str(folder), requirement],
            check=True, env=dict(os.environ, **env),
        )
        target = scratch / name
        unpack_py(next(folder.glob("*.tar.gz")), target)
        return target
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


def ruff_command() -> list[str]:
    ruff = shutil.which("ruff", path=str(Path(sys.executable).parent)) or shutil.which("ruff")
    if ruff is None:
        raise SystemExit("ruff is not installed: pip install ruff")
    return [ruff, "check", "--select", "ALL", "--output-format", "concise", "--no-cache", "--exit-zero"]


def bench(name: str, scratch: Path, equivalence: bool, repeat: int, floor: bool) -> list[str]:
    tree = tree_of(name, scratch)
    files = list(tree.rglob("*.py"))
    lines = sum(p.read_bytes().count(b"\n") for p in files)
    cglint = [sys.executable, "-m", "cglint", "check", "--exit-zero", "--format", "concise"]
    work = Path(tempfile.mkdtemp(dir=scratch))  # the cache lives here, not in the measured tree
    floor_time = measure([sys.executable, "-c", FLOOR, str(tree)], work)[0] if floor else float("nan")
    ruff_runs, cold_runs = [], []
    for _ in range(repeat):  # alternated: both see the same load
        ruff_runs.append(measure([*ruff_command(), str(tree)], work))
        cold_runs.append(measure([*cglint, "--no-cache", str(tree)], work))
    ruff = statistics.median(t for t, _ in ruff_runs)
    cold = statistics.median(t for t, _ in cold_runs)
    cold_mem = max(m for _, m in cold_runs)
    measure([*cglint, str(tree)], work)  # fills the cache
    warm, warm_mem = min((measure([*cglint, str(tree)], work) for _ in range(repeat)), key=lambda run: run[0])
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
        f"| {name} | {len(files):,} | {lines:,} | {ruff:.2f} s | {cold:.2f} s | **{cold / ruff:.2f}** | "
        f"{warm:.2f} s | {edited:.2f} s | {one_plain * 1000:.0f} ms | {one_capture * 1000:.0f} ms | "
        f"{max(cold_mem, warm_mem):.0f} MiB |" + (f" {floor_time:.1f} s |" if floor else "")
    )
    out = [row]
    if equivalence:
        done = subprocess.run([sys.executable, "-c", EQUIVALENCE, str(tree)], cwd=work, capture_output=True, text=True)
        out.append(f"<!-- {name} equivalence with a full parse: {done.stdout.strip() or done.stderr.strip()[-200:]} -->")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trees", nargs="+", help="fixtures, torch, megatron-core, diffusers, vllm-repo, or a folder")
    parser.add_argument("--repeat", type=int, default=3, help="paired ruff / cold cglint runs per tree (medians)")
    parser.add_argument("--equivalence", action="store_true")
    parser.add_argument("--floor", action="store_true", help="also time a libcst parse of every file")
    args = parser.parse_args()
    ruff = subprocess.run([*ruff_command()[:1], "--version"], capture_output=True, text=True).stdout.strip()
    versions = f"Python {platform.python_version()}, {ruff}, libcst {importlib.metadata.version('libcst')}"
    print(f"Machine: {platform.machine()}, {os.cpu_count()} cores, {versions}")
    print()
    print(
        "| tree | files | lines | ruff ALL, cold | cglint, cold | ratio | warm | warm, one file edited "
        "| one file, no capture | one file, capture | peak memory |" + (" libcst parse floor |" if args.floor else "")
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|" + ("---|" if args.floor else ""))
    # cglint's modules as `pip install` leaves them, compiled to bytecode: a source checkout
    # under PYTHONDONTWRITEBYTECODE would otherwise compile them again in every process.
    package = Path(__file__).resolve().parent.parent
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(package / "cglint"), str(package / "rules")], check=True, stdout=subprocess.DEVNULL)
    with tempfile.TemporaryDirectory() as scratch:
        for name in args.trees:
            for line in bench(name, Path(scratch), args.equivalence, args.repeat, args.floor):
                print(line, flush=True)


if __name__ == "__main__":
    main()
