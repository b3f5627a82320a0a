"""Static reach against ground truth: which of the functions a real capture runs does
`cglint reach` follow, with no configuration?

Ground truth comes from two places, never from cglint's output:
- bench/reach/lists/<project>.toml: the project functions that run during each capture of a
  pinned real project, listed by reading its code (bench/reach/lists/README.md);
- `--recorded FILE`: what `cglint verify --save-reach FILE` recorded in a real run on a GPU
  (same JSON shape as `cglint reach --format json`), checked against the static reach of the
  paths given with `--paths`.

    python bench/reach.py                      # every hand-made list (fetches the projects)
    python bench/reach.py flash-attn vllm      # some of them
    python bench/reach.py --missed             # also list each function not reached
    python bench/reach.py --recorded run.json --tree DIR --paths pkg   # a recorded run

Recall is |listed and reached| / |listed|, over the union of the project's captures (a
function counts once however many captures run it), with the breakdown by how the call that
reaches it is written (`how` in the lists). "extra" counts functions cglint reached that the
list does not name: not errors by themselves (the list follows one configuration), but a
large number means the reach is loose.
"""
from __future__ import annotations

import argparse
import json
import sys
import tomllib
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fetching import CheckError, FetchError, fetch, log, run_cglint  # bench/fetching.py
from realworld.run import DEFAULT_CACHE

HERE = Path(__file__).resolve().parent
LISTS = HERE / "reach" / "lists"
PROJECTS = HERE / "realworld" / "projects.toml"


@dataclass
class Score:
    name: str
    listed: dict[tuple[str, str], str] = field(default_factory=dict)  # (path, qualname) -> how
    reached: set[tuple[str, str]] = field(default_factory=set)
    unresolved: int = 0
    captures: int = 0
    seconds: float = 0.0
    peak_mib: float = 0.0
    error: str = ""

    @property
    def found(self) -> set[tuple[str, str]]:
        return set(self.listed) & self.reached

    @property
    def recall(self) -> float:
        return len(self.found) / len(self.listed) if self.listed else 0.0

    def by_how(self) -> dict[str, tuple[int, int]]:
        total = Counter(self.listed.values())
        hit = Counter(how for key, how in self.listed.items() if key in self.reached)
        return {how: (hit[how], n) for how, n in total.most_common()}


def listed_functions(data: dict) -> dict[tuple[str, str], str]:
    functions: dict[tuple[str, str], str] = {}
    for capture in data.get("captures", []):
        for entry in capture.get("reached", []):
            if "fn" in entry:  # a hand-made list
                path, qualname = entry["fn"].split("::", 1)
                functions.setdefault((path, qualname), entry.get("how", "?"))
            else:  # a recorded run
                functions.setdefault((entry["path"], entry["qualname"]), "recorded")
    return functions


def static_reach(tree: Path, paths: list[str]) -> tuple[dict, float, float]:
    return run_cglint(tree, paths, {}, subcommand=("reach",))


def score(name: str, listed: dict, tree: Path, paths: list[str]) -> Score:
    result = Score(name, listed)
    try:
        report, result.seconds, result.peak_mib = static_reach(tree, paths)
    except CheckError as exc:
        result.error = str(exc)
        return result
    result.captures = len(report["captures"])
    result.reached = {(r["path"], r["qualname"]) for c in report["captures"] for r in c["reached"]}
    result.unresolved = len({(u["path"], u["line"], u["call"]) for c in report["captures"] for u in c["unresolved"]})
    return result


def project_spec(name: str, data: dict) -> dict:
    projects = tomllib.loads(PROJECTS.read_text("utf-8"))
    spec = dict(projects.get(name, {}))
    spec.setdefault("requirement", data["requirement"])
    return spec


def print_table(scores: list[Score], missed: bool) -> None:
    print("| project | listed | reached | recall | extra | captures | calls not followed | time | memory |")
    print("|---|---|---|---|---|---|---|---|---|")
    for s in scores:
        if s.error:
            print(f"| {s.name} | {len(s.listed)} | error: {s.error[:80]} |")
            continue
        extra = len(s.reached - set(s.listed))
        print(f"| {s.name} | {len(s.listed)} | {len(s.found)} | {s.recall:.2f} | {extra} | {s.captures} | {s.unresolved} | {s.seconds:.1f} s | {s.peak_mib:.0f} MiB |")
    listed = sum(len(s.listed) for s in scores if not s.error)
    found = sum(len(s.found) for s in scores if not s.error)
    if listed:
        print(f"| all | {listed} | {found} | {found / listed:.2f} | | | | | |")
    how_total: Counter = Counter()
    how_hit: Counter = Counter()
    for s in scores:
        for how, (hit, n) in s.by_how().items():
            how_total[how] += n
            how_hit[how] += hit
    print("\nBy how the call is written: " + ", ".join(f"{how} {how_hit[how]}/{n}" for how, n in how_total.most_common()))
    if missed:
        for s in scores:
            for (path, qualname), how in sorted(s.listed.items()):
                if (path, qualname) not in s.reached:
                    print(f"  {s.name}: not reached {path}::{qualname} ({how})")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("projects", nargs="*", help="names of lists in bench/reach/lists (default: all)")
    parser.add_argument("--cache", type=Path, default=DEFAULT_CACHE, help="downloads and unpacked trees (shared with bench/realworld)")
    parser.add_argument("--missed", action="store_true", help="list every listed function not reached")
    parser.add_argument("--json", type=Path, help="write the figures as JSON ('-': stdout)")
    parser.add_argument("--recorded", type=Path, help="a `cglint verify --save-reach` file to compare with instead of the lists")
    parser.add_argument("--tree", type=Path, help="with --recorded: the folder the recorded paths are relative to")
    parser.add_argument("--paths", nargs="+", default=["."], help="with --recorded: what to give `cglint reach`")
    args = parser.parse_args(argv)
    scores: list[Score] = []
    if args.recorded:
        listed = listed_functions(json.loads(args.recorded.read_text("utf-8")))
        scores.append(score(args.recorded.stem, listed, (args.tree or Path.cwd()).resolve(), args.paths))
    else:
        files = sorted(LISTS.glob("*.toml"))
        chosen = [f for f in files if not args.projects or f.stem in args.projects]
        unknown = set(args.projects) - {f.stem for f in files}
        if unknown:
            parser.error(f"no reach list for {', '.join(sorted(unknown))}")
        for path in chosen:
            data = tomllib.loads(path.read_text("utf-8"))
            log(f"{path.stem}: fetching and following")
            try:
                tree = fetch(path.stem, project_spec(path.stem, data), args.cache)
            except FetchError as exc:
                scores.append(Score(path.stem, listed_functions(data), error=str(exc)))
                continue
            scores.append(score(path.stem, listed_functions(data), tree, data["paths"]))
    print_table(scores, args.missed)
    if args.json:
        figures = [{"project": s.name, "listed": len(s.listed), "reached": len(s.found), "recall": s.recall,
                    "by_how": s.by_how(), "error": s.error, "seconds": s.seconds} for s in scores]
        text = json.dumps(figures, indent=1)
        print(text) if str(args.json) == "-" else args.json.write_text(text, "utf-8")
    return 1 if any(s.error for s in scores) else 0


if __name__ == "__main__":
    sys.exit(main())
