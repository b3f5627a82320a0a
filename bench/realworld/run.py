"""Graded precision of `cglint check` on real projects that capture CUDA graphs.

Run on demand (not part of the test suite; the first run downloads a few hundred MB):

    python bench/realworld/run.py                      # every project in projects.toml
    python bench/realworld/run.py vllm nemo-toolkit    # some of them
    python bench/realworld/run.py --json summary.json  # and write the figures as JSON
    python bench/realworld/run.py --list               # every finding with its verdict
    python bench/realworld/run.py --stub               # TOML stubs for the ungraded findings

Each project of projects.toml is fetched (bench/fetching.py: only its .py files, into a
cache folder kept between runs) and checked by `python -m cglint check --format json` in a
child process, with the project's configuration, using the cglint of this checkout. Every
finding is matched against graded.toml, where each finding was read by hand and judged
`real` or `false`. An entry is keyed by file, code and the stripped text of the reported
line (the line number is only a hint, used to tell apart equal lines), so that it survives
lines moving; a finding that aggregates several lines (its `related` locations of the same
file) covers each of them.

Per project it prints: findings; graded real hazards still reported (TP); graded false
positives still reported (FP); graded real hazards no longer reported (MISS, a regression);
findings not graded yet (NEW, listed); precision TP / (TP + FP); wall time and peak memory
of the cglint process (with its workers). Exit status 1 when a real hazard is missed or a
run fails.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
from fetching import CheckError, FetchError, fetch, log, run_cglint  # noqa: E402  (bench/fetching.py)

PROJECTS = HERE / "projects.toml"
GRADED = HERE / "graded.toml"
DEFAULT_CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "cglint-realworld"


@dataclass
class Grade:
    file: str
    line: int
    code: str
    text: str
    verdict: str  # "real" or "false"
    reason: str
    pattern: str = ""  # for false positives: the pattern's name (README's ranked list)


@dataclass
class Outcome:
    name: str
    findings: list = field(default_factory=list)  # (finding, Grade or None)
    missing: list = field(default_factory=list)  # real Grades no finding covers
    seconds: float = 0.0
    peak_mib: float = 0.0
    error: str = ""

    def count(self, verdict: Optional[str]) -> int:
        return sum(1 for _, grade in self.findings if (grade.verdict if grade else None) == verdict)

    @property
    def precision(self) -> Optional[float]:
        tp, fp = self.count("real"), self.count("false")
        return tp / (tp + fp) if tp + fp else None


def load_grades(path: Path = GRADED) -> dict[str, list[Grade]]:
    if not path.exists():
        return {}
    data = tomllib.loads(path.read_text("utf-8"))
    return {name: [Grade(**entry) for entry in entries] for name, entries in data.items()}


def source_line(tree: Path, file: str, line: int, cache: dict) -> str:
    if file not in cache:
        try:
            cache[file] = (tree / file).read_text("utf-8", errors="replace").splitlines()
        except OSError:
            cache[file] = []
    lines = cache[file]
    return lines[line - 1].strip() if 0 < line <= len(lines) else ""


def match(findings: list[dict], grades: list[Grade], tree: Path) -> tuple[list, list[Grade]]:
    """Pair each finding with the graded entry of its file, code and line text (nearest line
    first); the real entries that no finding covers, primary or related line, are missing."""
    lines: dict = {}
    by_key: dict[tuple, list[Grade]] = {}
    for grade in grades:
        by_key.setdefault((grade.file, grade.code, grade.text), []).append(grade)
    used: set[int] = set()

    def take(file: str, code: str, line: int) -> Optional[Grade]:
        candidates = [g for g in by_key.get((file, code, source_line(tree, file, line, lines)), []) if id(g) not in used]
        if not candidates:
            return None
        best = min(candidates, key=lambda g: abs(g.line - line))
        used.add(id(best))
        return best

    paired = [(f, take(f["path"], f["code"], f["line"])) for f in sorted(findings, key=lambda f: (f["path"], f["line"], f["code"]))]
    for finding in findings:  # an aggregated finding covers its other lines too
        for other in finding.get("related") or []:
            if other.get("path") == finding["path"]:
                take(finding["path"], finding["code"], other["line"])
    missing = [g for g in grades if g.verdict == "real" and id(g) not in used]
    return paired, missing


def evaluate(name: str, spec: dict, grades: list[Grade], cache: Path, reports: Optional[Path]) -> tuple[Outcome, Path]:
    outcome = Outcome(name)
    tree = fetch(name, spec, cache)
    missing = [p for p in spec["paths"] if not (tree / p).exists()]
    if missing:
        raise CheckError(f"not in the package: {', '.join(missing)}")
    report = reports / f"{name}.json" if reports else None
    data, outcome.seconds, outcome.peak_mib = run_cglint(tree, spec["paths"], spec.get("config", {}), report)
    outcome.findings, outcome.missing = match(data["findings"], grades, tree)
    return outcome, tree


def stub(finding: dict, tree: Path) -> str:
    text = source_line(tree, finding["path"], finding["line"], {})
    return (
        f"[[{tree.name}]]\nfile = {json.dumps(finding['path'])}\nline = {finding['line']}\ncode = \"{finding['code']}\"\n"
        f"text = {json.dumps(text)}\nverdict = \"?\"\nreason = \"\"\n# {finding['message'][:160]}\n"
        f"# trace: {' -> '.join(finding.get('trace') or [])}\n"
    )


def percent(value: Optional[float]) -> str:
    return "-" if value is None else f"{value:.2f}"


def summary_row(o: Outcome) -> dict:
    return {
        "findings": len(o.findings), "real": o.count("real"), "false": o.count("false"), "missing": len(o.missing),
        "ungraded": o.count(None), "precision": o.precision, "seconds": round(o.seconds, 1), "peak_mib": round(o.peak_mib),
        "error": o.error or None,
    }


def main(argv: Optional[list[str]] = None) -> int:
    projects = tomllib.loads(PROJECTS.read_text("utf-8"))
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help=f"projects (default: all): {', '.join(projects)}")
    parser.add_argument("--cache", type=Path, default=DEFAULT_CACHE, help=f"downloads and unpacked trees, kept (default: {DEFAULT_CACHE})")
    parser.add_argument("--reports", type=Path, help="write each project's JSON report into this folder")
    parser.add_argument("--json", type=Path, metavar="FILE", help="write the summary as JSON ('-' for stdout)")
    parser.add_argument("--list", action="store_true", help="print every finding with its verdict")
    parser.add_argument("--stub", action="store_true", help="print graded.toml stubs for the ungraded findings")
    args = parser.parse_args(argv)
    unknown = [n for n in args.names if n not in projects]
    if unknown:
        parser.error(f"unknown project(s): {', '.join(unknown)}; known: {', '.join(projects)}")
    grades = load_grades()

    outcomes: list[Outcome] = []
    stubs: list[str] = []
    for name in args.names or list(projects):
        log(f"{name}: fetching and checking")
        try:
            outcome, tree = evaluate(name, projects[name], grades.get(name, []), args.cache.resolve(), args.reports)
        except (FetchError, CheckError) as exc:
            outcomes.append(Outcome(name, error=str(exc)))
            log(f"  {name}: FAILED: {exc}")
            continue
        outcomes.append(outcome)
        for finding, grade in outcome.findings:
            verdict = grade.verdict.upper() if grade else "NEW"
            if args.list or grade is None:
                print(f"  {name}: {verdict:5} {finding['path']}:{finding['line']} {finding['code']} {finding['message'][:110]}")
            if grade is None and args.stub:
                stubs.append(stub(finding, tree))
        for grade in outcome.missing:
            print(f"  {name}: MISS  {grade.file}:{grade.line} {grade.code} ({grade.text[:60]}): {grade.reason}")

    header = f"{'project':20} {'findings':>8} {'TP':>4} {'FP':>4} {'MISS':>4} {'NEW':>4} {'precision':>9} {'time':>7} {'memory':>8}"
    print("\n" + header + "\n" + "-" * len(header))
    for o in outcomes:
        if o.error:
            print(f"{o.name:20} FAILED: {o.error[:90]}")
            continue
        r = summary_row(o)
        print(f"{o.name:20} {r['findings']:8} {r['real']:4} {r['false']:4} {r['missing']:4} {r['ungraded']:4} "
              f"{percent(r['precision']):>9} {o.seconds:6.1f}s {o.peak_mib:5.0f} MiB")
    good = [o for o in outcomes if not o.error]
    tp, fp = sum(o.count("real") for o in good), sum(o.count("false") for o in good)
    total = {
        "findings": sum(len(o.findings) for o in good), "real": tp, "false": fp, "missing": sum(len(o.missing) for o in good),
        "ungraded": sum(o.count(None) for o in good), "precision": tp / (tp + fp) if tp + fp else None,
    }
    print(f"{'total':20} {total['findings']:8} {tp:4} {fp:4} {total['missing']:4} {total['ungraded']:4} {percent(total['precision']):>9}")
    if stubs:
        print("\n# --- stubs for graded.toml ---\n" + "\n".join(stubs))
    if args.json:
        summary = {"projects": {o.name: summary_row(o) for o in outcomes}, "total": total}
        text = json.dumps(summary, indent=2) + "\n"
        sys.stdout.write(text) if str(args.json) == "-" else args.json.write_text(text, encoding="utf-8")
    return 1 if any(o.error or o.missing for o in outcomes) else 0


if __name__ == "__main__":
    sys.exit(main())
