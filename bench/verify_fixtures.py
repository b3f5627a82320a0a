"""Run the runtime verifier over the fixture projects on a GPU and compare with the static markers.

    python bench/verify_fixtures.py [--out bench/verify-fixtures.md] [--json results.json]

Two runtime passes per fixture, each in its own process with the fixture folder as the
working directory (so finding paths match the fixtures' own paths):

* script: `cglint verify --format json SCRIPT ARGS` on the fixture's entry script, as a user
  would run it. Each capture stops at its first error, as on real hardware.
* api: `cglint.verify_function(fn, sample_args, measure_overhead=True)` on each captured function,
  built with a small configuration that turns the hazardous branches on. The verify
  warmup passes run the whole function eagerly, so hazards after the first one are seen
  too; the report also gives the capture time with and without instrumentation.

Every `# expect: CGxxx` marker (the static checker's expected findings) is then confirmed
(same file, line and code), confirmed under another code (same line), or not confirmed;
runtime findings on lines without a marker are listed as found only at run time.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO / "fixtures"
SCRIPTS = {  # fixture -> [(script, args)], short runs
    "training_step": [("train.py", ["--steps", "20", "--log-every", "10"])],
    "decode_loop": [("generate.py", ["--max-new-tokens", "8", "--prompt-len", "8"])],
    "graph_runner": [("serve.py", [])],
    "module_tree": [("train.py", [])],
    "clean_project": [("train.py", []), ("infer.py", [])],
}
HAND_WRITTEN = "<!-- hand-written below: kept when the report is regenerated -->"


# --- harnesses: run inside the fixture folder, one process each -------------------------------

def harness_training_step(verify, torch):
    import train
    from classifier import Classifier

    model = Classifier(train.IN_FEATURES, train.HIDDEN, train.NUM_CLASSES).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, capturable=True)
    scaler = train.GradScaler()

    def batch():
        return (torch.randn(64, train.IN_FEATURES, device="cuda"),
                torch.randint(0, train.NUM_CLASSES, (64,), device="cuda"))

    yield "train_step", verify(lambda x, y: train.train_step(model, opt, scaler, x, y), batch(), make_inputs=batch,
                               measure_overhead=True)


def harness_decode_loop(verify, torch):
    import generate
    from model import ModelArgs, Transformer
    from sampling import Sampler

    args = ModelArgs(dim=256, n_layers=2, n_heads=4, max_seq_len=128)
    model = Transformer(args).to(device="cuda", dtype=torch.bfloat16).eval()
    sampler = Sampler(args.vocab_size)
    prompt = torch.randint(1, args.vocab_size, (args.max_batch_size, 8), device="cuda")
    with torch.no_grad():
        token = generate.prefill(model, prompt)
        pos = torch.tensor([8], device="cuda")
        yield "decode_step", verify(
            lambda t, p: generate.decode_step(model, sampler, t, p, generate.STOP_TOKEN_IDS), (token, pos),
            measure_overhead=True)


def harness_graph_runner(verify, torch):
    from runner.model import ModelConfig, TinyLM

    config = ModelConfig(hidden_size=256, num_layers=2, embed_noise=0.1, profile_layers=True, log_every=1)
    model = TinyLM(config).cuda().eval()
    ids = torch.randint(0, config.vocab_size, (8,), device="cuda")
    pos = torch.randint(0, 512, (8,), device="cuda")
    with torch.inference_mode():
        yield "TinyLM.forward", verify(model, (ids, pos), measure_overhead=True)
        hidden = torch.randn(8, config.hidden_size, device="cuda")
        yield "TinyLM.compute_logits", verify(model.compute_logits, (hidden,), measure_overhead=True)


def harness_module_tree(verify, torch):
    from data.augment import augment_batch
    from net.model import TokenTagger

    model = TokenTagger(80, 128, depth=2, num_experts=4, num_tags=12).cuda()
    yield "TokenTagger", verify(model, (torch.randn(4, 32, 80, device="cuda"),), measure_overhead=True)
    lengths = torch.randint(16, 33, (4,), device="cuda")
    yield "augment_batch", verify(lambda f, n: augment_batch(f, n, seed=0),
                                  (torch.randn(4, 32, 80, device="cuda"), lengths), measure_overhead=True)


def harness_clean_project(verify, torch):
    import infer
    import train
    from network import Model, PoolingHead

    model = Model(1000, dim=128, depth=2, num_heads=4, heads={"lm": 1000, "cls": 4}).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, capturable=True, foreach=True)
    tokens = torch.randint(0, 1000, (4, 32), device="cuda")
    target = torch.randint(0, 1000, (4, 32), device="cuda")
    yield "train_step", verify(lambda t, y: train.train_step(model, opt, t, y), (tokens, target),
                               measure_overhead=True)
    params = list(model.parameters())
    ema = [p.detach().clone() for p in params]
    decay = torch.full((), 0.9, device="cuda")
    yield "ema_update", verify(lambda d: train.ema_update(ema, params, d), (decay,), measure_overhead=True)
    model.eval()
    with torch.inference_mode():
        out = torch.empty(4, 1000, device="cuda")
        yield "predict_step", verify(lambda t, o: infer.predict_step(model, t, o), (tokens, out),
                                     measure_overhead=True)
        mask = torch.ones(4, 32, dtype=torch.bool, device="cuda")
        yield "embed_step", verify(lambda t, m: infer.embed_step(model, t, m), (tokens, mask), measure_overhead=True)
        logits = torch.randn(4, 1000, device="cuda")
        yield "probabilities", verify(infer.probabilities, (logits, torch.empty_like(logits)), measure_overhead=True)
    head = PoolingHead(128, 4).cuda()
    hidden = torch.randn(4, 32, 128, device="cuda")
    yield "PoolingHead", verify(head, (hidden, mask), measure_overhead=True)


def run_harness(name: str) -> list[dict]:
    """Inside the fixture folder: every verify() of the fixture's harness, as JSON."""
    import torch

    import cglint

    sys.path.insert(0, os.getcwd())
    results = []
    try:
        for label, report in globals()[f"harness_{name}"](cglint.verify_function, torch):
            data = report.to_json()
            data["label"] = label
            results.append(data)
    except Exception as exc:  # noqa: BLE001 - a broken harness is a result too
        results.append({"label": "harness", "error": f"{type(exc).__name__}: {exc}"})
    return results


# --- driver --------------------------------------------------------------------------------

def _env() -> dict:
    env = dict(os.environ)  # cglint must be installed (pip install -e .): cglint.rules maps to rules/
    env["PYTHONUNBUFFERED"] = "1"
    return env


def run_scripts(name: str, timeout: int) -> list[dict]:
    results = []
    for script, args in SCRIPTS[name]:
        out_file = FIXTURES / name / ".verify.json"
        cmd = [sys.executable, "-m", "cglint", "verify", "--format", "json", "--output-file", str(out_file), script,
               *args]
        started = time.perf_counter()
        try:
            done = subprocess.run(cmd, cwd=FIXTURES / name, env=_env(), capture_output=True, text=True,
                                  timeout=timeout)
            code, stderr = done.returncode, done.stderr
        except subprocess.TimeoutExpired as exc:
            code, stderr = "timeout", (exc.stderr or b"").decode() if isinstance(exc.stderr, bytes) else (exc.stderr or "")
        findings = json.loads(out_file.read_text())["findings"] if out_file.exists() else []
        out_file.unlink(missing_ok=True)
        lines = stderr.splitlines()
        start = next((i for i, line in enumerate(lines) if line.startswith("cglint verify:")), len(lines))
        summary = lines[start:][:14]
        results.append({"script": f"{script} {' '.join(args)}".strip(), "exit": code, "findings": findings,
                        "seconds": round(time.perf_counter() - started, 1), "summary": summary})
    return results


def run_api(name: str, timeout: int) -> list[dict]:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--harness", name]
    try:
        done = subprocess.run(cmd, cwd=FIXTURES / name, env=_env(), capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return [{"label": "harness", "error": "timeout"}]
    try:
        return json.loads(done.stdout.strip().splitlines()[-1])
    except (IndexError, json.JSONDecodeError):
        return [{"label": "harness", "error": (done.stderr or done.stdout)[-800:]}]


def static_markers(name: str) -> set[tuple[str, str, int]]:
    sys.path.append(str(REPO))  # the test helpers read the markers
    from tests.helpers import expected_markers

    found = set()
    for path in sorted((FIXTURES / name).rglob("*.py")):
        rel = path.relative_to(FIXTURES / name).as_posix()
        found |= {(rel, code, line) for code, line in expected_markers(path.read_text())}
    return found


def compare(markers: set, runtime: list[dict]) -> dict:
    at = {}
    for f in runtime:
        at.setdefault((f["path"], f["line"]), set()).add(f["code"])
    confirmed, other, missed = [], [], []
    for path, code, line in sorted(markers):
        codes = at.get((path, line), set())
        (confirmed if code in codes else other if codes else missed).append((path, code, line, sorted(codes)))
    marked_lines = {(p, line) for p, _, line in markers}
    extra = sorted({(f["path"], f["line"], f["code"], f["message"]) for f in runtime
                    if (f["path"], f["line"]) not in marked_lines})
    return {"confirmed": confirmed, "other_code": other, "missed": missed, "runtime_only": extra}


# --- the report ----------------------------------------------------------------------------

def _ms(value) -> str:
    return "-" if value is None else f"{value:.1f}"


def write_markdown(results: dict, out: Path) -> None:
    totals = dict.fromkeys(("markers", "confirmed", "other_code", "missed", "runtime_only"), 0)
    lines = ["# Runtime verifier over the fixtures", "",
             f"Generated by `python bench/verify_fixtures.py` on {results['device']} with torch {results['torch']}.",
             "A marker is confirmed when a runtime finding has its file, line and code.", ""]
    overhead = []
    for name, fx in results["fixtures"].items():
        cmp = fx["comparison"]
        totals["markers"] += fx["markers"]
        for key in ("confirmed", "other_code", "missed", "runtime_only"):
            totals[key] += len(cmp[key])
        lines += [f"## {name}", "", f"{fx['markers']} static markers: {len(cmp['confirmed'])} confirmed, "
                  f"{len(cmp['other_code'])} on the same line under another code, {len(cmp['missed'])} not seen "
                  f"at run time; {len(cmp['runtime_only'])} runtime findings on unmarked lines.", ""]
        lines += ["| marker | verdict | runtime codes on the line | by script | by api |", "|---|---|---|---|---|"]
        by_script = {(p, c, n) for p, c, n, _ in fx["by_pass"]["script"]["confirmed"]}
        by_api = {(p, c, n) for p, c, n, _ in fx["by_pass"]["api"]["confirmed"]}
        for key, verdict in (("confirmed", "confirmed"), ("other_code", "other code"), ("missed", "not seen")):
            for path, code, line, codes in cmp[key]:
                lines.append(f"| `{path}:{line}` {code} | {verdict} | {', '.join(codes) or '-'} | "
                             f"{'yes' if (path, code, line) in by_script else ''} | "
                             f"{'yes' if (path, code, line) in by_api else ''} |")
        if cmp["runtime_only"]:
            lines += ["", "Runtime findings on lines without a marker:", ""]
            lines += [f"- `{p}:{n}` {c}: {m[:160]}" for p, n, c, m in cmp["runtime_only"]]
        lines += ["", "Scripts (`cglint verify`):", ""]
        for s in fx["scripts"]:
            lines.append(f"- `{s['script']}`: exit {s['exit']}, {len(s['findings'])} findings, {s['seconds']} s")
            shown = s["summary"]
            first = next((i for i, line in enumerate(shown) if line.startswith("cglint verify:")), len(shown))
            lines += [f"  - `{line.strip()}`" for line in shown[first:] if line.strip()]
        lines += ["", "API (`cglint.verify_function`):", ""]
        for a in fx["api"]:
            if "error" in a:
                lines.append(f"- {a['label']}: harness error `{a['error'][-300:]}`")
                continue
            state = "capture failed" if a.get("capture_error") else "captured"
            lines.append(f"- {a['label']}: {state}; codes {', '.join(sorted({f['code'] for f in a['findings']})) or '-'}; "
                         f"capture {_ms(a.get('capture_ms'))} ms instrumented / {_ms(a.get('bare_capture_ms'))} ms bare; "
                         f"eager {_ms(a.get('eager_ms'))} ms, replay {_ms(a.get('replay_ms'))} ms")
            if a.get("capture_ms") and a.get("bare_capture_ms"):
                overhead.append((f"{name}/{a['label']}", a["capture_ms"], a["bare_capture_ms"]))
        lines.append("")
    lines += ["## Totals", "", f"- static markers: {totals['markers']}", f"- confirmed: {totals['confirmed']}",
              f"- same line, other code: {totals['other_code']}", f"- not seen at run time: {totals['missed']}",
              f"- runtime findings on unmarked lines: {totals['runtime_only']}", ""]
    if overhead:
        lines += ["## Instrumentation overhead on capture time", "",
                  "| function | instrumented ms | bare ms | ratio |", "|---|---|---|---|"]
        lines += [f"| {label} | {a:.1f} | {b:.1f} | {a / b:.1f}x |" for label, a, b in overhead]
        lines.append("")
    old = out.read_text() if out.exists() else ""
    kept = old[old.index(HAND_WRITTEN):] if HAND_WRITTEN in old else HAND_WRITTEN + "\n"
    out.write_text("\n".join(lines) + "\n" + kept)


def judge(name: str, scripts: list[dict], api: list[dict]) -> dict:
    markers = static_markers(name)
    by_script = [f for s in scripts for f in s["findings"]]
    by_api = [f for a in api for f in a.get("findings", [])]
    return {"markers": len(markers), "comparison": compare(markers, by_script + by_api),
            "by_pass": {"script": compare(markers, by_script), "api": compare(markers, by_api)}}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--harness", help=argparse.SUPPRESS)
    parser.add_argument("--out", default=str(REPO / "bench" / "verify-fixtures.md"))
    parser.add_argument("--json", help="also write the raw results here")
    parser.add_argument("--timeout", type=int, default=240)
    parser.add_argument("--only", nargs="*", default=list(SCRIPTS))
    parser.add_argument("--from-json", help="only render the report from results saved with --json")
    args = parser.parse_args()
    if args.harness:
        print(json.dumps(run_harness(args.harness)))
        return 0
    if args.from_json:  # re-render, comparing the saved runtime findings with today's markers
        results = json.loads(Path(args.from_json).read_text())
        for name, fx in results["fixtures"].items():
            fx.update(judge(name, fx["scripts"], fx["api"]))
        write_markdown(results, Path(args.out))
        return 0
    import torch

    if not torch.cuda.is_available():
        print("verify_fixtures: needs a CUDA device", file=sys.stderr)
        return 2
    results = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "fixtures": {}}
    for name in args.only:
        print(f"== {name}", file=sys.stderr, flush=True)
        scripts, api = run_scripts(name, args.timeout), run_api(name, args.timeout)
        results["fixtures"][name] = {"scripts": scripts, "api": api, **judge(name, scripts, api)}
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1, default=str))
    write_markdown(results, Path(args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
