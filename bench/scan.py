"""Scan real projects with cglint and compare with a committed baseline.

Run on demand (not part of the test suite; it downloads a few hundred MB):

    python bench/scan.py                   # every project, compared with bench/scan-baseline.json
    python bench/scan.py vllm sglang       # some of them
    python bench/scan.py --update          # write the baseline from this run
    python bench/scan.py --keep DIR --reports DIR   # keep the unpacked trees and the JSON reports

Each project is fetched (bench/fetching.py) at a pinned version with `pip download --no-deps` into a
temporary folder and only its `.py` files are unpacked from the wheel or sdist (nothing
of their code is kept or committed). `torch` is the installed package's sources (the
pinned version must be installed; otherwise it is downloaded like the others), and
`cpython-stdlib` is the running interpreter's standard library with its test suite,
which holds files with odd encodings and deliberately broken syntax.

Entries with `config` run with project knowledge in the configuration (`captured`,
`capture-functions`): the setups behind bench/false-positive-review.md.

Per project it records the Python files in the tree, the files cglint checked, the
findings per rule and the internal errors (CG000). The run fails (exit 1), loudly, when:

- cglint crashes, exits with status 2 or writes no JSON report;
- a project cannot be fetched (unless the baseline marks it `skipped`, with the reason);
- the number of files drifts from the baseline (an empty scan never looks clean);
- any internal error (CG000) appears.

Changed finding counts are printed as a difference; with `--strict` they fail too (rules
change on purpose; re-run with `--update` and review the difference).
"""
from __future__ import annotations

import argparse
import json
import platform
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Optional

from fetching import CheckError, FetchError, fetch, log, run_cglint  # bench/fetching.py (this script's folder is on sys.path)

HERE = Path(__file__).resolve().parent
BASELINE = HERE / "scan-baseline.json"

# name -> how to get it, what to scan (folders inside the unpacked package) and extra configuration.
PROJECTS: dict[str, dict] = {
    "torch": {"installed": "torch", "version": "2.13.0", "paths": ["torch"]},
    "vllm": {"requirement": "vllm==0.33.0", "paths": ["vllm"]},
    "sglang": {"requirement": "sglang==0.5.23", "paths": ["sglang"]},
    "megatron-core": {"requirement": "megatron-core==0.16.1", "paths": ["megatron"]},
    "transformer-engine": {"requirement": "transformer-engine==2.20.2", "paths": ["transformer_engine/pytorch"]},
    "cpython-stdlib": {"stdlib": True, "version": "3.11.7", "paths": ["Lib"]},
}

# Known-captured entry points, configured as a user of each engine would (see the review).
# `paths` are the files that hold them (and the engines' own graph runners); the modules they
# call are read on demand. Engines build decoder layers through factories the checker cannot
# follow (vLLM's make_layers, islice over them), so layers are named one by one.
_V = "vllm.model_executor"
_S = "sglang.srt"
_M = "megatron.core.transformer"
REVIEWS: dict[str, dict] = {
    "vllm+captured": {
        "from": "vllm",
        "paths": [
            "vllm/model_executor/models/llama.py", "vllm/model_executor/models/qwen2.py",
            "vllm/model_executor/models/mixtral.py", "vllm/compilation/cuda_graph.py",
            "vllm/model_executor/layers/attention/attention.py", "vllm/model_executor/layers/layernorm.py",
            "vllm/model_executor/layers/activation.py", "vllm/model_executor/layers/linear.py",
            "vllm/model_executor/layers/rotary_embedding/base.py", "vllm/model_executor/layers/vocab_parallel_embedding.py",
        ],
        "config": {
            "captured": [
                f"{_V}.models.llama.LlamaModel.forward", f"{_V}.models.llama.LlamaDecoderLayer.forward",
                f"{_V}.models.llama.LlamaAttention.forward", f"{_V}.models.llama.LlamaMLP.forward",
                f"{_V}.models.qwen2.Qwen2DecoderLayer.forward", f"{_V}.models.qwen2.Qwen2Attention.forward",
                f"{_V}.models.mixtral.MixtralDecoderLayer.forward", f"{_V}.models.mixtral.MixtralMoE.forward",
                f"{_V}.layers.attention.attention.Attention.forward", f"{_V}.layers.layernorm.RMSNorm.forward_cuda",
                f"{_V}.layers.activation.SiluAndMul.forward_cuda", f"{_V}.layers.linear.ColumnParallelLinear.forward",
                f"{_V}.layers.linear.RowParallelLinear.forward", f"{_V}.layers.rotary_embedding.base.RotaryEmbedding.forward_cuda",
                f"{_V}.layers.vocab_parallel_embedding.VocabParallelEmbedding.forward",
            ],
        },
    },
    "sglang+captured": {
        "from": "sglang",
        "paths": [
            "sglang/srt/models/llama.py", "sglang/srt/models/qwen2.py", "sglang/srt/layers/radix_attention.py",
            "sglang/srt/layers/layernorm.py", "sglang/srt/model_executor/runner_backend/full_cuda_graph_backend.py",
            "sglang/srt/model_executor/runner/metadata_glue_graph.py",
        ],
        "config": {
            "captured": [
                f"{_S}.models.llama.LlamaModel.forward", f"{_S}.models.llama.LlamaDecoderLayer.forward",
                f"{_S}.models.llama.LlamaAttention.forward", f"{_S}.models.llama.LlamaMLP.forward",
                f"{_S}.models.qwen2.Qwen2DecoderLayer.forward", f"{_S}.models.qwen2.Qwen2Attention.forward",
                f"{_S}.layers.radix_attention.RadixAttention.forward", f"{_S}.layers.layernorm.RMSNorm.forward_cuda",
            ],
        },
    },
    "megatron-core+captured": {
        "from": "megatron-core",
        "paths": [
            "megatron/core/transformer/transformer_layer.py", "megatron/core/transformer/attention.py",
            "megatron/core/transformer/mlp.py", "megatron/core/transformer/cuda_graphs.py",
        ],
        "config": {
            "captured": [
                f"{_M}.transformer_layer.TransformerLayer.forward", f"{_M}.attention.Attention.forward", f"{_M}.mlp.MLP.forward",
            ],
        },
    },
}


class ScanError(Exception):
    """A project could not be scanned."""


# --- scanning -------------------------------------------------------------------------
def scan(tree: Path, paths: list[str], config: dict, report: Optional[Path], name: str) -> dict:
    missing = [p for p in paths if not (tree / p).exists()]
    if missing:
        raise ScanError(f"not in the package: {', '.join(missing)}")
    py_files = sum(1 if (tree / p).is_file() else sum(1 for f in (tree / p).rglob("*.py") if f.is_file()) for p in paths)
    try:
        data, seconds, _ = run_cglint(tree, paths, config, report / f"{name}.json" if report else None)
    except CheckError as exc:
        raise ScanError(str(exc)) from None
    counts = Counter(f["code"] for f in data["findings"])
    internal = [f for f in data["findings"] if f["code"] == "CG000"]
    return {
        "py_files": py_files,
        "files_checked": data["files_checked"],
        "findings": dict(sorted(counts.items())),
        "internal_errors": len(internal),
        "internal_error_samples": [f"{f['path']}:{f['line']}: {f['message']}" for f in internal[:5]],
        "seconds": round(seconds, 1),
    }


# --- comparing ------------------------------------------------------------------------
def compare(name: str, got: dict, want: Optional[dict], strict: bool) -> list[str]:
    """Failures (strings); differences in findings are printed, and fail only when strict."""
    failures = []
    if got["internal_errors"]:
        failures.append(f"{name}: {got['internal_errors']} internal error(s) (CG000): " + "; ".join(got["internal_error_samples"]))
    if got["files_checked"] == 0:
        failures.append(f"{name}: no file was checked (an empty scan is not a clean one)")
    if want is None:
        failures.append(f"{name}: not in the baseline (run with --update)")
        return failures
    for key in ("py_files", "files_checked"):
        if got[key] != want.get(key):
            failures.append(f"{name}: {key} drifted: {want.get(key)} in the baseline, {got[key]} now")
    before, after = Counter(want.get("findings", {})), Counter(got["findings"])
    changed = {code: (before[code], after[code]) for code in sorted(set(before) | set(after)) if before[code] != after[code]}
    if changed:
        text = ", ".join(f"{code} {a} -> {b}" for code, (a, b) in changed.items())
        log(f"  {name}: findings changed: {text}")
        if strict:
            failures.append(f"{name}: findings changed (--strict): {text}")
    return failures


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help=f"projects (default: all): {', '.join([*PROJECTS, *REVIEWS])}")
    parser.add_argument("--baseline", type=Path, default=BASELINE)
    parser.add_argument("--update", action="store_true", help="write this run's figures to the baseline")
    parser.add_argument("--strict", action="store_true", help="fail when finding counts differ from the baseline")
    parser.add_argument("--keep", type=Path, help="unpack into this folder and keep it (default: a temporary folder)")
    parser.add_argument("--reports", type=Path, help="write each project's JSON report into this folder")
    args = parser.parse_args(argv)

    every = {**PROJECTS, **REVIEWS}
    names = args.names or list(every)
    unknown = [n for n in names if n not in every]
    if unknown:
        parser.error(f"unknown project(s): {', '.join(unknown)}")
    baseline = json.loads(args.baseline.read_text("utf-8")) if args.baseline.exists() else {"projects": {}}
    recorded = baseline.setdefault("projects", {})

    failures: list[str] = []
    results: dict[str, dict] = {}
    scratch_owner = None
    if args.keep is None:
        scratch_owner = tempfile.TemporaryDirectory(prefix="cglint-scan-")
        scratch = Path(scratch_owner.name)
    else:
        scratch = args.keep.resolve()
        scratch.mkdir(parents=True, exist_ok=True)
    try:
        for name in names:
            spec = every[name]
            base = PROJECTS[spec["from"]] if "from" in spec else spec
            log(f"{name}: fetching")
            want = recorded.get(name)
            try:
                tree = fetch(spec.get("from", name), base, scratch)
                paths = spec.get("paths", base["paths"])
                log(f"{name}: scanning {', '.join(paths)}")
                got = scan(tree, paths, spec.get("config", {}), args.reports, name)
            except FetchError as exc:
                if args.update:
                    log(f"  {name}: cannot be had, recorded as skipped: {exc}")
                    results[name] = {"skipped": str(exc)}
                elif want and want.get("skipped"):
                    log(f"  {name}: skipped, as in the baseline ({want['skipped']})")
                else:
                    failures.append(f"{name}: {exc}")
                continue
            except ScanError as exc:
                failures.append(f"{name}: {exc}")
                continue
            got["version"] = base.get("requirement", "").partition("==")[2] or base.get("version", "")
            results[name] = got
            log(
                f"  {name}: {got['files_checked']} files checked ({got['py_files']} .py), "
                f"{sum(got['findings'].values())} findings, {got['internal_errors']} internal errors, {got['seconds']} s"
            )
            if not args.update:
                failures += compare(name, got, want, args.strict)
    finally:
        if scratch_owner is not None:
            scratch_owner.cleanup()

    if args.update:
        for name, got in results.items():
            recorded[name] = {k: v for k, v in got.items() if k not in ("seconds", "internal_error_samples")}
        baseline["python"] = platform.python_version()
        baseline["projects"] = dict(sorted(recorded.items()))
        args.baseline.write_text(json.dumps(baseline, indent=2) + "\n", encoding="utf-8")
        log(f"baseline written: {args.baseline}")
        failures += [f"{n}: {g['internal_errors']} internal error(s) (CG000)" for n, g in results.items() if g.get("internal_errors")]

    print(json.dumps({name: {k: v for k, v in got.items() if k != "internal_error_samples"} for name, got in results.items()}, indent=2))
    if failures:
        log("")
        log("SCAN FAILED:")
        for failure in failures:
            log(f"  - {failure}")
        return 1
    log("scan clean: every project matches the baseline's file counts, no internal errors")
    return 0


if __name__ == "__main__":
    sys.exit(main())
