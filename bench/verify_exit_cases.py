"""`cglint verify` on scripts that fail their capture or diverge, each also ending with os._exit(0).

    python bench/verify_exit_cases.py [--exit-out bench/verify-exit.md]
                                      [--divergence-out bench/verify-divergence.md] [--jobs 8]

Two sets of scripts, written as real code is:

* capture errors (bench/verify_exit_cases/): capture on the default stream, make_graphed_callables
  under autocast with its cache on, a module with hooks passed to make_graphed_callables, a
  non-capturable optimizer's step() in a capture, `.item()` in a capture, torch.cuda.synchronize
  in a capture. Each catches the error and falls back (`return None`); its exit variant calls
  `os._exit(0)` from that `except` clause instead, as launchers that log and exit do.
* divergence (tests/data/divergence/): host state the capture froze changes between replays;
  one clean counterpart. Their exit variant ends the script with `os._exit(0)` after its replays.

Every script and variant runs under `cglint verify --format json` in its own process (a copy in a
temporary folder, so paths read as in the repository). A report is intact when the JSON parses,
the variant's findings equal the plain script's, its captures have the same statuses, and its
`run` says how it ended (`os._exit(0)` at its line). Located: every `# expect: CODE` line is
reported with that code. Needs a GPU for the capture errors (on the CPU the emulation cannot
raise them); writes two Markdown reports.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.helpers import expected_markers  # noqa: E402

CAPTURE_ERRORS = REPO / "bench" / "verify_exit_cases"
DIVERGENCE = REPO / "tests" / "data" / "divergence"
EXIT_LINE = "return None  # exit variant: os._exit(0)"
# global_setter is a package: this runner calls it as an application would.
GLOBAL_SETTER_RUNNER = """import torch

from global_setter import pipeline

uncond = torch.randn(4, 64, device="cuda")
cond = torch.randn(4, 64, device="cuda")
out = pipeline.run(uncond, cond, [3.0, 7.5, 12.0])
print(out.sum().item())
"""


@dataclass
class Case:
    group: str  # "capture error" or "divergence"
    name: str
    folder: Path  # the working directory of the run
    script: str  # relative to folder
    expected: set[tuple[str, str, int]]  # (path, code, line)
    variant: str = "plain"  # or "os._exit(0)"
    result: dict[str, Any] = field(default_factory=dict)
    returncode: Optional[int] = None
    stderr: str = ""


def exit_variant_of_capture_script(text: str) -> str:
    lines = text.splitlines(keepends=True)
    out = []
    for line in lines:
        if line.strip() == EXIT_LINE:
            indent = line[: len(line) - len(line.lstrip())]
            line = f"{indent}os._exit(0)  # the launcher logs and exits\n"
        out.append(line)
    changed = "".join(out)
    if changed == text:
        raise SystemExit(f"no `{EXIT_LINE}` line to turn into os._exit(0)")
    return changed


def exit_variant_of_divergence_script(text: str) -> str:
    return text.rstrip("\n") + "\n\nimport os  # noqa: E402\n\nos._exit(0)  # ends as launchers do, skipping interpreter teardown\n"


def markers(folder: Path, files: list[str]) -> set[tuple[str, str, int]]:
    found = set()
    for name in files:
        for code, line in expected_markers((folder / name).read_text()):
            found.add((name, code, line))
    return found


def prepare(work: Path) -> list[Case]:
    cases: list[Case] = []
    for variant in ("plain", "os._exit(0)"):
        folder = work / ("capture_errors" if variant == "plain" else "capture_errors_exit")
        folder.mkdir()
        for source in sorted(CAPTURE_ERRORS.glob("*.py")):
            text = source.read_text()
            (folder / source.name).write_text(text if variant == "plain" else exit_variant_of_capture_script(text))
            cases.append(Case("capture error", source.stem, folder, source.name, markers(folder, [source.name]),
                              variant))
        folder = work / ("divergence" if variant == "plain" else "divergence_exit")
        shutil.copytree(DIVERGENCE, folder, ignore=shutil.ignore_patterns("*.md", "__pycache__"))
        (folder / "run_global_setter.py").write_text(GLOBAL_SETTER_RUNNER)
        for source in sorted(folder.glob("*.py")):
            if variant != "plain":
                source.write_text(exit_variant_of_divergence_script(source.read_text()))
            files = [source.name] if source.name != "run_global_setter.py" else \
                ["run_global_setter.py", "global_setter/pipeline.py", "global_setter/config.py"]
            name = "global_setter" if source.name == "run_global_setter.py" else source.stem
            cases.append(Case("divergence", name, folder, source.name, markers(folder, files), variant))
    return cases


def run(case: Case, timeout: float) -> Case:
    cmd = [sys.executable, "-m", "cglint", "verify", "--format", "json", case.script]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    try:
        done = subprocess.run(cmd, cwd=case.folder, capture_output=True, text=True, timeout=timeout, env=env)
        case.returncode, case.stderr = done.returncode, done.stderr
        case.result = json.loads(done.stdout) if done.stdout.strip() else {}
    except subprocess.TimeoutExpired:
        case.returncode, case.stderr = None, "timed out"
    except ValueError as exc:
        case.stderr = f"stdout was not JSON: {exc}\n{case.stderr}"
    return case


def found(case: Case) -> set[tuple[str, str, int]]:
    return {(f["path"], f["code"], f["line"]) for f in case.result.get("findings", [])}


def shown(items: set[tuple[str, str, int]], folder_files: int) -> str:
    if not items:
        return "none"
    return ", ".join(f"{code} {path if folder_files > 1 else ''}:{line}".replace(" :", " ") for path, code, line
                     in sorted(items, key=lambda t: (t[2], t[1])))


def intact(variant: Case, plain: Case) -> tuple[bool, str]:
    """Whether the os._exit variant's report is the plain script's report, complete."""
    if not variant.result:
        return False, f"no report ({variant.stderr.strip().splitlines()[-1:] or ['no output']})"
    why = []
    if found(variant) != found(plain):
        why.append(f"findings differ from the plain run ({shown(found(variant) ^ found(plain), 2)})")
    statuses = [c["status"] for c in variant.result.get("captures", [])]
    if statuses != [c["status"] for c in plain.result.get("captures", [])]:
        why.append(f"captures {statuses}")
    run_ = variant.result.get("run", {})
    if run_.get("exit_status") != 0 or "os._exit(0)" not in str(run_.get("error")):
        why.append(f"run {run_}")
    return not why, "; ".join(why) or f"yes ({run_.get('error')})"


def capture_table(cases: list[Case]) -> list[str]:
    plain = {c.name: c for c in cases if c.variant == "plain"}
    rows = ["| script | expected (code:line) | reported, plain | reported, os._exit(0) variant | located | "
            "captures (variant) | report intact |", "|---|---|---|---|---|---|---|"]
    for case in (c for c in cases if c.variant != "plain"):
        base = plain[case.name]
        ok, why = intact(case, base)
        located = case.expected <= found(case) and base.expected <= found(base)
        statuses = ", ".join(c["status"] for c in case.result.get("captures", [])) or "none"
        rows.append(f"| {case.script} | {shown(case.expected, 1)} | {shown(found(base), 1)} | {shown(found(case), 1)} | "
                    f"{'yes' if located else 'NO'} | {statuses} | {why if ok else 'NO: ' + why} |")
    return rows


def divergence_rows(cases: list[Case]) -> list[str]:
    plain = {c.name: c for c in cases if c.variant == "plain"}
    rows = ["| case | expected (code:line) | reported | located | os._exit(0) variant intact |",
            "|---|---|---|---|---|"]
    for case in (c for c in cases if c.variant != "plain"):
        base = plain[case.name]
        ok, why = intact(case, base)
        files = len({p for p, _, _ in base.expected | found(base)})
        located = base.expected <= found(base) and (bool(base.expected) or not found(base))
        rows.append(f"| {case.name} | {shown(base.expected, files)} | {shown(found(base), files)} | "
                    f"{'yes' if located else 'NO'} | {'yes' if ok else 'NO: ' + why} |")
    return rows


def divergence_messages(cases: list[Case]) -> list[str]:
    out = []
    for case in (c for c in cases if c.variant == "plain"):
        for f in case.result.get("findings", []):
            related = "; ".join(f"{r['path']}:{r['line']} {r.get('message', '')}".strip() for r in f.get("related", []))
            out.append(f"- {case.name}: `{f['code']}` {f['path']}:{f['line']}: {f['message']}"
                       + (f" (related: {related})" if related else ""))
    return out


def header() -> str:
    import torch

    device = torch.cuda.get_device_name() if torch.cuda.is_available() else "no GPU (CPU trace mode)"
    return f"{device}, torch {torch.__version__}, Python {sys.version.split()[0]}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--exit-out", default=str(REPO / "bench" / "verify-exit.md"))
    parser.add_argument("--divergence-out", default=str(REPO / "bench" / "verify-divergence.md"))
    parser.add_argument("--json", help="also write every report here")
    parser.add_argument("--jobs", type=int, default=8)
    parser.add_argument("--timeout", type=float, default=180)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        cases = prepare(Path(tmp))
        with ThreadPoolExecutor(args.jobs) as pool:
            list(pool.map(lambda c: run(c, args.timeout), cases))
    errors = [c for c in cases if c.group == "capture error"]
    divergence = [c for c in cases if c.group == "divergence"]
    title = header()
    exit_lines = ["# `cglint verify` on failed captures that end with os._exit(0)", "",
                  f"`python bench/verify_exit_cases.py` on {title}.", "",
                  "Each script in bench/verify_exit_cases/ catches its capture error and falls back; its variant "
                  "calls `os._exit(0)` from the `except` clause instead. Both run under `cglint verify --format json`. "
                  "*Report intact*: the variant's JSON has the plain run's findings and capture statuses, and its "
                  "`run` names the `os._exit(0)` call.", "", *capture_table(errors), "",
                  "The divergence scripts of tests/data/divergence ending with `os._exit(0)` after their replays "
                  "(bench/verify-divergence.md):", "", *divergence_rows(divergence), ""]
    Path(args.exit_out).write_text("\n".join(exit_lines))
    div_lines = ["# `cglint verify` over tests/data/divergence", "",
                 f"`python bench/verify_exit_cases.py` on {title}. Each program changes host state its capture "
                 "read between replays (the clean one keeps it in a device tensor refilled in place); the replay "
                 "guards must report each at its `# expect:` line, with the value at capture, the value now and, "
                 "where the verifier sees it, the line that changed it.", "", *divergence_rows(divergence), "",
                 "Findings, as reported:", "", *divergence_messages(divergence), ""]
    Path(args.divergence_out).write_text("\n".join(div_lines))
    if args.json:
        Path(args.json).write_text(json.dumps([{"group": c.group, "name": c.name, "variant": c.variant,
                                                "returncode": c.returncode, "report": c.result,
                                                "stderr": c.stderr[-4000:]} for c in cases], indent=1))
    print("\n".join(exit_lines))
    print("\n".join(div_lines))


if __name__ == "__main__":
    main()
