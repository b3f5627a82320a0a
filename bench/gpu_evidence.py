"""Run each error and warning rule's hazard on a real GPU and record what happens.

    python bench/gpu_evidence.py --out rules/gpu-evidence.json [CG101 CG201 ...]

Every rule's minimal program is data in bench/gpu_cases/CGxxx.py: the hazard of the
rule's first bad example, made self-contained. An `error` rule's case performs the
capture the rule says fails; a `warning` rule's case captures, replays and returns how
far replay is from eager execution. Each case runs in its own process (a failed
capture can leave the CUDA context unusable) and the outcome is compared with the
severity the case declares (the rule's severity, kept equal by tests/test_gpu_evidence.py):

    error   agrees when capture (or the graphing call) raises
    warning agrees when capture succeeds and replay diverges from eager
    info    agrees when capture succeeds and replay matches (rules the GPU showed harmless)

A case may declare `OUTCOME = "..."` where the severity alone does not say what it shows:
an info rule whose hazard is lost host output counts lines, which differ (`diverged`).

Needs only torch, so it runs from a plain checkout on a GPU machine.
"""
from __future__ import annotations

import argparse
import concurrent.futures
import json
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Optional

CASES = Path(__file__).resolve().parent / "gpu_cases"
MARK = "@@EVIDENCE@@"
# Exceptions that mean the case itself is broken, not that the GPU refused something.
CASE_BUGS = ("NameError", "AttributeError", "ImportError", "ModuleNotFoundError", "SyntaxError", "KeyError", "UnboundLocalError")

# Runs inside the child process: import the case, call hazard(), print one JSON line.
BOOTSTRAP = r"""
import json, runpy, sys
sys.path.insert(0, {cases!r})
import _harness
def text(exc):
    lines = [l.strip() for l in str(exc).strip().splitlines() if l.strip()]
    return (type(exc).__name__ + ": " + " ".join(lines[:3]))[:400]
try:
    namespace = runpy.run_path({path!r})
    value = namespace["hazard"]()
    if not isinstance(value, dict):
        value = {{"divergence": value}}
    result = dict(captured=True, **value)
except BaseException as exc:
    chain, seen = [], exc
    while seen is not None and len(chain) < 4:
        chain.append(text(seen))
        seen = seen.__context__ or seen.__cause__
    result = dict(captured=False, phase=_harness.PHASE, error=chain[-1], errors=chain)
print({mark!r} + json.dumps(result, default=str), flush=True)
"""


def case_meta(path: Path) -> dict:
    text = path.read_text("utf-8")
    severity = re.search(r'^SEVERITY = "(\w+)"', text, re.M)
    measure = re.search(r'^MEASURE = "([^"]*)"', text, re.M)
    outcome = re.search(r'^OUTCOME = "(\w+)"', text, re.M)
    doc = re.search(r'^"""(.*?)"""', text, re.S)
    return {
        "severity": severity.group(1) if severity else "",
        "measure": measure.group(1) if measure else "",
        "case": doc.group(1).strip().splitlines()[0] if doc else "",
        **({"outcome": outcome.group(1)} if outcome else {}),
    }


def run_case(path: Path, timeout: float) -> dict:
    """One case in its own process; never raises (a broken case is recorded as such)."""
    meta = case_meta(path)
    try:
        return _run_case(path, meta, timeout)
    except Exception as exc:  # noqa: BLE001 - the runner must record every case
        return {**meta, "captured": False, "phase": "runner", "error": f"{type(exc).__name__}: {exc}", "observed": "case_error", "agrees": False}


def _run_case(path: Path, meta: dict, timeout: float) -> dict:
    code = BOOTSTRAP.format(cases=str(CASES), path=str(path), mark=MARK)
    start = time.perf_counter()
    try:
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout)
        lines = [line for line in proc.stdout.splitlines() if line.startswith(MARK)]
        if lines:
            result = json.loads(lines[-1][len(MARK):])
        else:
            tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
            result = {"captured": False, "phase": "process", "error": f"process exited {proc.returncode}: {' '.join(tail)[:400]}"}
    except subprocess.TimeoutExpired:
        result = {"captured": False, "phase": "timeout", "error": f"no result within {timeout:.0f} s"}
    result["seconds"] = round(time.perf_counter() - start, 1)
    return {**meta, **judge(meta["severity"], result, meta.get("outcome"))}


def judge(severity: str, result: dict, outcome: Optional[str] = None) -> dict:
    """Name the observed outcome and whether it agrees with the severity."""
    if not result.get("captured"):
        error = result.get("error", "")
        # A failure before capture (building the case, eager warmup) says nothing about capture.
        broken = error.split(":")[0] in CASE_BUGS or result.get("phase") in ("setup", "warmup", "timeout", "process")
        observed = "case_error" if broken else "capture_failed"
    else:
        divergence, control = _number(result.get("divergence")), _number(result.get("control"))
        observed = "diverged" if divergence > max(1e-5, 10 * control) else "matched"
    # An info rule (kept as info after a GPU run) claims neither a failure nor a divergence.
    expected = outcome or {"error": "capture_failed", "warning": "diverged", "info": "matched"}.get(severity)
    agrees = observed == expected
    return {**result, "observed": observed, "agrees": agrees}


def _number(value) -> float:
    """A case that returns nothing (its capture succeeded, nothing to compare) measured 0."""
    try:
        return float(value or 0.0)
    except (TypeError, ValueError):
        return 0.0


def environment() -> dict:
    import torch

    return {
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "device": torch.cuda.get_device_name() if torch.cuda.is_available() else "none",
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("codes", nargs="*", help="only these rules (default: every case)")
    parser.add_argument("--out", type=Path, default=Path("rules/gpu-evidence.json"))
    parser.add_argument("--jobs", type=int, default=4, help="cases run at once (they are small)")
    parser.add_argument("--timeout", type=float, default=180.0, help="seconds per case")
    args = parser.parse_args(argv)
    paths = sorted(p for p in CASES.glob("CG*.py") if not args.codes or p.stem in args.codes)
    previous = json.loads(args.out.read_text("utf-8")) if args.out.exists() else {"rules": {}}
    if not args.codes:  # a full run replaces every entry, but keeps what `cglint verify` confirmed (bench/verify_compiled.py)
        previous = {"rules": {c: e for c, e in previous.get("rules", {}).items() if "verify" in e}}
    header = {"generated_by": "bench/gpu_evidence.py", **environment()}
    results: dict = {}
    with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as pool:
        futures = {pool.submit(run_case, p, args.timeout): p.stem for p in paths}
        for future in concurrent.futures.as_completed(futures):
            code, entry = futures[future], future.result()
            confirmed = previous.get("rules", {}).get(code, {}).get("verify")
            results[code] = {**entry, "verify": confirmed} if confirmed else entry
            detail = entry.get("error") or f"divergence {entry.get('divergence')}" + (f" ({entry['note']})" if entry.get("note") else "")
            print(f"{code} {entry['severity']:<7} {entry['observed']:<14} {'ok ' if entry['agrees'] else 'NO '} {detail}", flush=True)
            # Written after every case: a run stopped early still leaves what it found.
            rules = {**previous.get("rules", {}), **results}
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(json.dumps({**header, "rules": dict(sorted(rules.items()))}, indent=2) + "\n", "utf-8")
    disagree = [c for c, e in results.items() if not e["agrees"]]
    print(f"{len(results) - len(disagree)} of {len(results)} agree" + (f"; disagree: {' '.join(disagree)}" if disagree else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
