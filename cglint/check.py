"""`cglint check` as a function: paths and configuration in, findings out."""
from __future__ import annotations

import ast
import dataclasses
import gc
import os
import re
import traceback
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Iterable, Optional

from cglint import catalogue, configured_names, source, suppress
from cglint.config import Config
from cglint.discovery import discover, forget_folders, module_name_for, relative_to, resolved
from cglint.engine.prefilter import EntryFiles, can_capture, code_can_capture, names_word
from cglint.findings import Finding, Region, Related, filled
from cglint.footprint import Footprint
from cglint.reach import CaptureReach, Coverage, Reached, Unresolved
from cglint.rule import REPLAY
from cglint.selection import Selection

# Lines an aggregated finding's message names: eight keep the message about one terminal
# line long; all of them are in its related locations.
_LINES_LISTED = 8

if TYPE_CHECKING:  # the engine (and libcst) load only when some file can hold a capture
    import libcst as cst

    from cglint import cache
    from cglint.engine.checker import RawHit
    from cglint.engine.definitions import ModuleInfo
    from cglint.engine.positions import Positions


@dataclass
class CheckResult:
    findings: list[Finding] = field(default_factory=list)
    files_checked: int = 0
    also_read: list[Path] = field(default_factory=list)  # modules outside the checked files that calls reached
    # The engine's hit behind each finding of a rule that can fix it (what --fix works from).
    hits: dict = field(default_factory=dict, repr=False, compare=False)
    footprint: Optional[Footprint] = field(default=None, repr=False, compare=False)
    coverage: Coverage = field(default_factory=Coverage)  # what the engine followed from the captures
    reach: list[CaptureReach] = field(default_factory=list)  # the same in full, when asked for


@dataclass
class _EngineRun:
    findings: list[Finding] = field(default_factory=list)
    read: list[Path] = field(default_factory=list)  # parsed, or reported as unparsable
    helpers: frozenset = frozenset()
    searches: dict[str, list[Path]] = field(default_factory=dict)
    missing: list[str] = field(default_factory=list)  # modules looked for on disk, not found
    unresolved: Optional[list[tuple[str, str]]] = None  # configured names found nowhere (CG003)
    coverage: Coverage = field(default_factory=Coverage)
    reach: list[CaptureReach] = field(default_factory=list)


def display_path(path: Path) -> str:
    """Paths relative to the working directory when below it, as users typed them otherwise."""
    return relative_to(path, resolved(Path(os.getcwd())))


def check_paths(
    paths: Iterable[Path],
    config: Config,
    selection: Optional[Selection] = None,
    force_exclude: bool = False,
    use_cache: bool = False,
    reach: bool = False,
) -> CheckResult:
    """Check the files found under `paths`; `selection` defaults to the configuration's;
    `reach` lists what each capture reached (never from the cache, which keeps counts only)."""
    selection = selection or Selection.of(config)
    files, missing = discover(list(paths), config.excludes, config.root, force_exclude)
    if not use_cache or reach:
        return check_files(files, config, selection, missing, reach=reach)
    from cglint import cache

    folder = config.root / cache.CACHE_DIR
    settings = {"config": vars(config), "codes": sorted(selection.codes), "missing": missing, "cwd": Path.cwd()}
    digests = cache.file_digests(folder, files)
    entries = EntryFiles(config.capture_functions, config.captured)
    key = cache.run_key(digests, settings)
    hit = cache.load(folder, key)
    if hit is not None:
        return CheckResult(hit[0], hit[1], coverage=hit[2])
    base = cache.base_key(digests, settings)
    previous = cache.load_base(folder, base)
    result = _reuse(previous, files, digests, selection, missing, entries) if previous is not None else None
    if result is None:
        result = check_files(files, config, selection, missing)
    footprint = result.footprint
    cache.store(folder, key, result.findings, result.files_checked, result.also_read, footprint.absent if footprint else [], result.coverage)
    if footprint is not None:
        cache.store_base(folder, base, digests, footprint, result.also_read)
    return result


def _reuse(previous: cache.BaseRun, files: list[Path], digests: dict, selection: Selection, missing: list[Path], entries: EntryFiles) -> Optional[CheckResult]:
    """The previous run's result over the same files, if no file that changed since could
    change what the engine found; the changed files' own read errors are new."""
    before = previous.footprint
    helpers = before.helpers
    searches = {text: set(paths) for text, paths in before.searches.items()}
    per_file = dict(before.per_file)
    for path in files:
        given = os.path.abspath(path)
        if previous.digests.get(given, "") == digests[given]:
            continue
        if str(resolved(path)) in before.read:
            return None  # the engine read it: its findings may change
        loaded = source.load(path, display_path(path))
        text = loaded.text if isinstance(loaded, source.SourceFile) and not suppress.skips_file(loaded.text) else ""
        if entries.by_text(text) or names_word(text, helpers):
            return None  # the engine would read it now
        if any((needle in text) != (given in paths) for needle, paths in searches.items()):
            return None  # a search over every file would answer differently
        found = [_diagnostic(display_path(path), loaded)] if isinstance(loaded, source.SourceError) else []
        per_file[given] = selection.reported(found)
    lost = selection.reported(_diagnostic(display_path(p), _missing(p)) for p in missing)
    result = sorted(set(before.engine + [f for found in per_file.values() for f in found] + lost), key=lambda f: f.sort_key)
    footprint = replace(before, per_file={p: f for p, f in per_file.items() if f})
    return CheckResult(result, len(files), previous.deps, footprint=footprint, coverage=before.coverage)


def check_files(
    files: list[Path],
    config: Config,
    selection: Optional[Selection] = None,
    missing: Iterable[Path] = (),
    sources: Optional[dict[Path, str]] = None,
    prefilter: bool = True,
    whole_modules: bool = False,
    reach: bool = False,
) -> CheckResult:
    """Check `files`; `sources` gives the text of files that are not (or not yet) on disk.
    `prefilter=False` parses every file whole up front (the reference the fast path must
    equal); `whole_modules` parses whole every module it parses (what --fix rewrites);
    `reach` lists what was followed from each capture (`cglint reach`)."""
    selection = selection or Selection.of(config)
    forget_folders()
    diagnostics: list[Finding] = [_diagnostic(display_path(p), _missing(p)) for p in missing]
    checked = {resolved(p) for p in files}
    texts: dict[Path, str] = {}
    roots: list[Path] = []
    module_names: dict[Path, str] = {}
    per_file: dict[Path, list[Finding]] = {}  # read and syntax errors, by file
    for path in files:
        given = (sources or {}).get(path)
        loaded = source.SourceFile(path, display_path(path), given) if given is not None else source.load(path, display_path(path))
        if isinstance(loaded, source.SourceError):
            per_file[path] = [_diagnostic(display_path(path), loaded)]
            continue
        if suppress.skips_file(loaded.text):
            continue
        texts[path] = loaded.text
        module_names[path], root, _ = module_name_for(path)
        roots.append(root)
    roots += [root for root in (config.root, config.root / "src") if root.is_dir()]
    # Only files that can hold a capture are parsed up front; everything they reach is
    # parsed on demand, and the rest is never parsed (most of a large tree).
    helper_names = set(config.capture_functions)
    entries = EntryFiles(config.capture_functions, config.captured)
    configured, scanned = _by_bytes(texts, module_names, entries) if prefilter else (list(texts), [])
    fixable: dict = {}
    # The engine reports the syntax errors of the files it parses (README, "Syntax errors").
    engine_diagnostics: list[Finding] = []  # about modules the engine parsed
    run = _EngineRun()
    if configured or scanned:
        run = _deep_stack(
            _run_engine, texts, configured, scanned, roots, checked, config, selection, engine_diagnostics, helper_names, sources, fixable, whole_modules or not prefilter, reach
        )
    names = [("captured", n) for n in config.captured] + [("capture-functions", n) for n in sorted(set(config.capture_functions))]
    unresolved = names if run.unresolved is None else run.unresolved
    engine_diagnostics += configured_names.diagnostics(unresolved, config.source, texts.values(), display_path)
    read = set(run.read)  # resolved, the entry files among them
    engine = selection.reported(run.findings + engine_diagnostics)
    per_file = {path: selection.reported(found) for path, found in per_file.items()}
    result = engine + [f for found in per_file.values() for f in found] + selection.reported(diagnostics)
    result = sorted(set(result), key=lambda f: f.sort_key)
    footprint = Footprint(read, frozenset(entries.tokens), run.helpers, run.searches, run.missing, engine, {p: f for p, f in per_file.items() if f}, run.coverage)
    also_read = [p for p in run.read if p not in checked]
    return CheckResult(result, len(files), also_read, {f: fixable[f] for f in result if f in fixable}, footprint, run.coverage, run.reach)


def _by_bytes(texts: dict[Path, str], module_names: dict[Path, str], entries: EntryFiles) -> tuple[list[Path], list[Path]]:
    """(files the configuration enters, files whose bytes hold a capture token)."""
    configured, scanned = [], []
    for path, text in texts.items():
        if entries.by_configuration(text) or entries.by_module(module_names[path]):
            configured.append(path)
        elif can_capture(text):
            scanned.append(path)
    return configured, scanned


def _by_code(texts: dict[Path, str], scanned: list[Path]) -> tuple[list[Path], dict[Path, ast.Module]]:
    """The scanned files whose code, not only their strings and comments, names a capture
    form (prefilter.code_can_capture), with the `ast` trees that tell (their outlines are
    built from them); a file that does not parse is kept, so that its error is reported."""
    kept, trees = [], {}
    for path in scanned:
        tree = source.cpython_tree(texts[path])
        if not isinstance(tree, ast.Module):
            kept.append(path)
        elif code_can_capture(tree):
            kept.append(path)
            trees[path] = tree
    return kept, trees


def _missing(path: Path) -> source.SourceError:
    """Why a path given or found cannot be read: absent, a broken symbolic link, a link loop,
    not a regular file (read_bytes never waits on a named pipe)."""
    if path.is_symlink() or path.exists():
        error = source.read_bytes(path)
        if isinstance(error, source.SourceError):
            return error
    return source.SourceError("CG001", "no such file or directory")


# Valid code can nest deeper than Python's default recursion limit allows libcst to walk
# (a 900-term `a + b + ...`, 190 nested brackets): the engine runs in a thread with room.
# The deepest trees measured that CPython's parser accepts under its default limits (a sum
# of about 3,000 terms, as many chained calls) need about 9,500 frames to check: the limit is
# four times that, and the stack leaves 13 KiB to each frame of it.
_STACK_BYTES = 512 * 2**20
_RECURSION_LIMIT = 40_000


def _deep_stack(function, *args):
    """`function(*args)` in a thread with a large stack and a high recursion limit."""
    import sys
    import threading

    outcome: list = []

    def run() -> None:
        try:
            outcome.append((True, function(*args)))
        except BaseException as exc:  # noqa: BLE001 - re-raised in the calling thread
            outcome.append((False, exc))

    limit = sys.getrecursionlimit()
    try:
        previous = threading.stack_size(_STACK_BYTES)
    except (ValueError, RuntimeError):  # a platform that cannot size thread stacks
        return function(*args)
    # Raised before the thread starts: a thread takes the limit in force when it begins.
    sys.setrecursionlimit(max(limit, _RECURSION_LIMIT))
    try:
        worker = threading.Thread(target=run, name="cglint-engine", daemon=True)
        worker.start()
    except RuntimeError:  # no thread with such a stack can be started (a low memory limit)
        sys.setrecursionlimit(limit)
        return function(*args)
    finally:
        threading.stack_size(previous)
    try:
        worker.join()
    finally:
        sys.setrecursionlimit(limit)
    ok, value = outcome[0]
    if not ok:
        raise value
    return value


# Freeing the trees of a large run, object by object, takes a second or more. A command-line
# run that is about to exit sets this to keep them, and exits without freeing them (cli.run).
KEEP_TREES = False
_kept: list = []


def _run_engine(*args) -> _EngineRun:
    # Parsing and walking allocate many short-lived objects and no cycles worth collecting:
    # the collector's passes over the growing trees cost a tenth of the run.
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        return _engine_findings(*args)
    finally:
        if KEEP_TREES:
            gc.freeze()  # kept until exit: a collection would only walk them (most of a second on torch)
        if was_enabled:
            gc.enable()


def _engine_findings(texts, configured, scanned, roots, checked, config, selection, diagnostics, helper_names, sources=None, fixable=None, whole_modules=False, reach=False) -> _EngineRun:
    from cglint.engine.checker import Engine
    from cglint.engine.project import Project

    # Modules reached by calls are read from `sources` too (fixes not yet written).
    given = {path.resolve(): text for path, text in (sources or {}).items()}
    project = Project(display_path, lambda path, error: diagnostics.append(_diagnostic(display_path(path), error)), whole_modules, texts, given)
    for root in dict.fromkeys(roots):
        project.add_root(root)
    rules = [rule() for rule in catalogue.rule_classes() if selection.runs(rule.code) and rule.scope != "runtime"]
    engine = Engine(project, rules, config.capture_functions, config.captured, on_error=lambda m, e: _internal(diagnostics, m, e))
    kept, trees = _by_code(texts, scanned)
    chosen = set(configured).union(kept)
    entry = [p for p in texts if p in chosen]  # in the files' order, as discovery depends on it
    modules = [m for m in (project.module_for_path(p, texts[p], trees.pop(p, None)) for p in entry) if m is not None]
    engine.discover_modules(modules)
    helpers, mentioning = _distinctive(engine.helper_names() - helper_names, texts)
    if helpers:
        entered = set(entry)
        modules += [m for p in mentioning if p not in entered and (m := project.module_for_path(p, texts[p])) is not None]
        engine.discover_modules(modules, helpers)
    hits = engine.run()
    if KEEP_TREES:
        _kept.append(engine)
    found = _findings(hits, checked, selection, fixable)
    captures = [c for c in engine.all_captures() if c.site.module.file.path.resolve() in checked]
    run = _EngineRun(found, project.attempted_paths(), frozenset(helpers), project.searches, project.missing, engine.unresolved_entries())
    graph = [(capture, *engine.reach_graph.reach(capture)) for capture in captures]
    run.coverage = _coverage(graph)
    run.reach = _reach(graph) if reach else []
    return run


# A name more files than this mention (`replay`, `wrapper`, `launch` in a serving engine's
# package) finds no callers worth reading: on SGLang's 4,700 files four such names pulled in
# a thousand modules for the second scan and doubled the run.
_SCAN_LIMIT = 64


def _distinctive(names: set[str], texts: dict) -> tuple[set[str], list]:
    """The names at most _SCAN_LIMIT of the files mention as a word, and the files (in the
    order of `texts`) that mention one of them: one search of each text per name."""
    counts = dict.fromkeys(names, 0)
    mentions: dict = {}
    for path, text in texts.items():
        found = {name for name, count in counts.items() if count <= _SCAN_LIMIT and names_word(text, (name,))}
        for name in found:
            counts[name] += 1
        if found:
            mentions[path] = found
    kept = {name for name, count in counts.items() if count <= _SCAN_LIMIT}
    return kept, [path for path, found in mentions.items() if not found.isdisjoint(kept)]


def _coverage(graph: list[tuple]) -> Coverage:
    functions = {key for _, reached, _ in graph for key in reached}
    calls = {key for _, _, unfollowed in graph for key in unfollowed}
    return Coverage(len(graph), len(functions), len(calls))


def _reach(graph: list[tuple]) -> list[CaptureReach]:
    """What each capture site reached, with positions (only `cglint reach` pays for them)."""
    from cglint.engine.positions import Positions  # the engine loads lazily
    from cglint.engine.syntax import code_of

    positions = Positions()

    def line(module, node) -> int:
        span = positions.of(module, node)
        return span.start.line if span else 0

    found = []
    for capture, reached, unfollowed in graph:
        site = capture.site
        entry = CaptureReach(site.module.display, line(site.module, site.node), capture.region_kind)
        for function, trace in reached.values():
            via = tuple(f"{s.module.display}:{line(s.module, s.node)} {s.text}" for s in trace)
            entry.reached.append(Reached(function.module.display, function.dunder_qualname, line(function.module, getattr(function.node, "name", function.node)), via))
        for module, call, why in unfollowed.values():
            entry.unresolved.append(Unresolved(module.display, line(module, call), code_of(call.func), why))
        entry.reached.sort(key=lambda r: (r.path, r.line, r.qualname))
        entry.unresolved.sort(key=lambda u: (u.path, u.line, u.call))
        found.append(entry)
    return sorted(found, key=lambda c: (c.path, c.line))


def _internal(diagnostics: list[Finding], module: "ModuleInfo", exc: BaseException) -> None:
    where = traceback.extract_tb(exc.__traceback__)[-1] if exc.__traceback__ else None
    detail = f" at {Path(where.filename).name}:{where.lineno}" if where else ""
    message = f"internal error: {type(exc).__name__}: {exc}{detail}; please report this file to cglint"
    diagnostics.append(_diagnostic(module.display, source.SourceError("CG000", message)))


def _diagnostic(path: str, error: source.SourceError) -> Finding:
    name, _ = catalogue.TOOL_DIAGNOSTICS[error.code]
    severity = "error"
    return Finding(path, error.line, error.column, error.line, error.column, error.code, "internal", severity, error.message, "")


def _findings(hits: list["RawHit"], checked: set[Path], selection: Selection, fixable: Optional[dict] = None) -> list[Finding]:
    from cglint.engine.positions import Positions  # the engine loads lazily

    positions = Positions()
    findings: list[Finding] = []
    repeated: dict[tuple, list] = {}  # (path, code, function, region) of rules that aggregate
    logical_ends: dict[int, dict] = {}  # id(file) -> suppress.logical_ends of its text
    for hit in hits:
        # Report hazards in the files being checked, and hazards reached from a capture in them.
        region_file = hit.capture.site.module.file.path.resolve() if hit.capture else None
        if hit.module.file.path.resolve() not in checked and region_file not in checked:
            continue
        span = positions.of(hit.module, hit.node)
        if span is None:
            continue
        lines = hit.module.file.lines[span.start.line - 1 : span.end.line]
        if selection.suppressed(hit.rule.code, lines) or _suppressed_at_end(hit, span.start.line, selection, logical_ends):
            continue
        region, trace = _region_and_trace(hit, positions)
        findings.append(
            finding := Finding(
                path=hit.module.display,
                line=span.start.line,
                column=span.start.column + 1,
                end_line=span.end.line,
                end_column=span.end.column + 1,
                code=hit.rule.code,
                category=hit.rule.category,
                severity=hit.rule.severity,
                message=filled(hit.rule.message, hit.details),
                fix_hint=filled(hit.rule.fix_hint, hit.details),
                region=region,
                trace=trace,
                related=_related(hit.details.get("related", ()), positions),
            )
        )
        if hit.rule.aggregate:
            findings.pop()
            repeated.setdefault((finding.path, finding.code, hit.function.key, finding.region), []).append((finding, hit.details.get("expr", "")))
        elif fixable is not None and hit.rule.can_fix():
            fixable[finding] = hit
    return findings + [_aggregated(group) for group in repeated.values()]


_SUPPRESSION_WORD = re.compile(r"noqa|cglint:", re.IGNORECASE)


def _suppressed_at_end(hit: "RawHit", line: int, selection: Selection, cache: dict) -> bool:
    """Whether a suppression comment at the end of the multi-line logical line that holds
    `line` covers the hit (the only place Python allows one after a backslash or a
    multi-line string); the file is tokenized once, and only if it has such comments."""
    file = hit.module.file
    ends = cache.get(id(file))
    if ends is None:
        ends = cache[id(file)] = suppress.logical_ends(file.text) if _SUPPRESSION_WORD.search(file.text) else {}
    end = ends.get(line)
    return end is not None and selection.suppressed(hit.rule.code, file.lines[end - 1 : end])


def _related(locations, positions: "Positions") -> tuple[Related, ...]:
    """The related locations a hit names (rule.Location: a module, a node, a message), placed."""
    found = []
    for location in locations:
        span = positions.of(location.module, location.node)
        if span is not None:
            found.append(Related(location.module.display, span.start.line, span.start.column + 1, location.message))
    return tuple(dict.fromkeys(found))


def _aggregated(group: list[tuple[Finding, str]]) -> Finding:
    """The first of a function's hits of one rule, with the others as related locations."""
    group.sort(key=lambda pair: pair[0].sort_key)
    first, seen = group[0][0], {(group[0][0].line, group[0][0].column)}
    others = []
    for f, expr in group[1:]:
        if (f.line, f.column) not in seen:  # one line reached along two call chains is one
            seen.add((f.line, f.column))
            others.append(Related(f.path, f.line, f.column, f"also `{expr}`" if expr else f.message))
    if not others:
        return first
    lines = ", ".join(str(r.line) for r in others[:_LINES_LISTED]) + (", ..." if len(others) > _LINES_LISTED else "")
    message = f"{first.message} (and {len(others)} more in this function: line{'s' if len(others) > 1 else ''} {lines})"
    return dataclasses.replace(first, message=message, related=first.related + tuple(others))


def _region_and_trace(hit: "RawHit", positions: "Positions") -> tuple[Optional[Region], tuple[str, ...]]:
    if hit.capture is None:
        return None, ()

    def step(s, node: "Optional[cst.CSTNode]" = None) -> str:
        span = positions.of(s.module, node or s.node)
        line = span.start.line if span else 0
        return f"{s.module.display}:{line} {s.text}"

    site = hit.capture.site
    site_span = positions.of(site.module, site.node)
    region = Region(site.module.display, site_span.start.line if site_span else 0, hit.capture.region_kind)
    trace = [step(s) for s in hit.trace]
    function = hit.function
    # Code reached from a region ends its trace with the function it is in; code that runs
    # between replays is not reached from the capture, whose site alone is its trace.
    if function is not hit.capture.function and hasattr(function.node, "name") and hit.rule.scope != REPLAY:
        from cglint.engine.captures import TraceStep  # the engine loads lazily

        trace.append(step(TraceStep(function.module, function.node, function.qualname), function.node.name))
    return region, tuple(trace)
