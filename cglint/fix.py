"""Safe automatic fixes: `cglint check --fix` and `--diff`.

A rule that can repair its finding defines `fix(node, ctx)`, where `node` is the node it
reported and `ctx` a `FixContext` (the parents of nodes, the finding's message details, and
helpers for common edits). It returns None (no safe fix here), a replacement for `node`,
`cst.RemovalSentinel.REMOVE`, or a dict {original node: replacement} when other nodes change.
Rules offer only transformations that keep what the GPU computes (each rule's `fix_safety`).

This module applies them with libcst to the modules the engine parsed, in passes: a pass
applies the fixes that touch disjoint parts of a file and checks the project again. A fix is
kept only if the file still parses, no finding of its rule is left where it was, and no file
gains a finding; otherwise it is dropped and the pass is redone without it. Passes repeat
until nothing is left to fix, so fixing a fixed file changes nothing.
"""
from __future__ import annotations

import difflib
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Optional

import libcst as cst
from libcst.metadata import MetadataWrapper, PositionProvider

from cglint import baseline, source
from cglint.check import CheckResult, check_files
from cglint.config import Config
from cglint.engine.syntax import children
from cglint.findings import Finding
from cglint.selection import Selection

# Each pass applies the fixes that do not overlap and checks the result again; overlapping
# fixes, and a batch one bad fix spoiled, wait for the next pass. The fixtures are fixed in one
# pass (and a second that finds nothing left): ten bounds the full re-checks when fixes keep
# being rejected.
MAX_PASSES = 10


class FixContext:
    """What a rule's `fix` may use: the module, parents, details, and edit helpers."""

    def __init__(self, tree: cst.Module):
        self.tree = tree
        self.details: dict = {}
        self._parents: Optional[dict[int, cst.CSTNode]] = None

    def parent(self, node: cst.CSTNode) -> Optional[cst.CSTNode]:
        if self._parents is None:
            self._parents = {}
            stack: list[cst.CSTNode] = [self.tree]
            while stack:
                current = stack.pop()
                for child in children(current):
                    self._parents[id(child)] = current
                    stack.append(child)
        return self._parents.get(id(node))

    def ancestors(self, node: cst.CSTNode) -> Iterable[cst.CSTNode]:
        current = self.parent(node)
        while current is not None:
            yield current
            current = self.parent(current)

    def function_of(self, node: cst.CSTNode) -> cst.CSTNode:
        """The innermost def (or the module) that contains `node`."""
        return next((a for a in self.ancestors(node) if isinstance(a, (cst.FunctionDef, cst.Lambda))), self.tree)

    # --- edits -------------------------------------------------------------
    @staticmethod
    def with_keyword(call: cst.Call, name: str, value: cst.BaseExpression) -> cst.Call:
        """`call` with `name=value`, replacing an existing `name=` or appended after the last argument."""
        args = list(call.args)
        for i, arg in enumerate(args):
            if arg.keyword is not None and arg.keyword.value == name:
                args[i] = arg.with_changes(value=value)
                return call.with_changes(args=args)
        new = cst.Arg(value=value, keyword=cst.Name(name), equal=cst.AssignEqual(cst.SimpleWhitespace(""), cst.SimpleWhitespace("")))
        if args:
            last = args[-1]
            if isinstance(last.comma, cst.Comma):  # a trailing comma stays trailing
                between = args[-2].comma if len(args) > 1 and isinstance(args[-2].comma, cst.Comma) else cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
                new = new.with_changes(comma=last.comma)
                args[-1] = last.with_changes(comma=between)
            else:  # the new argument takes the space before `)` (a newline in a multi-line call)
                new = new.with_changes(whitespace_after_arg=last.whitespace_after_arg)
                args[-1] = last.with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")), whitespace_after_arg=cst.SimpleWhitespace(""))
        return call.with_changes(args=[*args, new])

    @staticmethod
    def without_keyword(call: cst.Call, name: str) -> Optional[cst.Call]:
        args = list(call.args)
        for i, arg in enumerate(args):
            if arg.keyword is not None and arg.keyword.value == name:
                del args[i]
                if i == len(args) and args:  # it was the last: its predecessor takes its comma and the space before `)`
                    args[-1] = args[-1].with_changes(comma=arg.comma, whitespace_after_arg=arg.whitespace_after_arg)
                return call.with_changes(args=args)
        return None

    def remove_statement(self, small: cst.BaseSmallStatement) -> Optional[dict]:
        """Changes that remove one simple statement, keeping blocks non-empty and comments above it."""
        line = self.parent(small)
        if isinstance(line, cst.SimpleStatementSuite) or (isinstance(line, cst.SimpleStatementLine) and len(line.body) > 1):
            body = [s for s in line.body if s is not small]
            if not body:
                return {small: cst.Pass()}
            if line.body[-1] is small:
                body[-1] = body[-1].with_changes(semicolon=cst.MaybeSentinel.DEFAULT)
            return {line: line.with_changes(body=body)}
        if not isinstance(line, cst.SimpleStatementLine):
            return None
        block = self.parent(line)
        if not isinstance(block, (cst.IndentedBlock, cst.Module)) or not any(s is line for s in block.body):
            return None
        statements = list(block.body)
        index = next(i for i, s in enumerate(statements) if s is line)
        comments = [e for e in line.leading_lines if e.comment is not None]
        if len(statements) == 1:
            return {line: line.with_changes(body=[cst.Pass()], trailing_whitespace=cst.TrailingWhitespace())}
        if not comments:
            return {line: cst.RemovalSentinel.REMOVE}
        if index + 1 < len(statements):
            after = statements[index + 1]
            # (BaseStatement declares no leading_lines; both of its kinds have them.)
            return {line: cst.RemovalSentinel.REMOVE, after: after.with_changes(leading_lines=[*line.leading_lines, *after.leading_lines])}  # type: ignore[attr-defined]
        # The last statement of its block, with comments above it: they stay, as the block's footer.
        del statements[index]
        return {block: block.with_changes(body=statements, footer=[*line.leading_lines, *block.footer])}


@dataclass(eq=False)
class Edit:
    finding: Finding
    key: tuple
    changes: dict  # id(original) -> (original, replacement)
    ctx: FixContext
    home: set = field(default_factory=set)  # ids of the changed nodes that hold the finding's node
    spans: list = field(default_factory=list)  # lines of those replacements in the fixed text


@dataclass
class FileFix:
    path: Path  # resolved
    display: str
    before: str
    after: str
    fixed: int = 0


@dataclass
class FixOutcome:
    result: CheckResult  # the findings left after the fixes
    files: dict[Path, FileFix]

    @property
    def fixed(self) -> int:
        return sum(f.fixed for f in self.files.values())

    def diff(self) -> str:
        parts = []
        for change in sorted(self.files.values(), key=lambda c: c.display):
            for line in difflib.unified_diff(
                change.before.splitlines(keepends=True), change.after.splitlines(keepends=True),
                f"a/{change.display}", f"b/{change.display}",
            ):
                parts.append(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n")
        return "".join(parts)

    def write(self) -> list[str]:
        """Write the fixed files; returns the problems (files changed on disk meanwhile)."""
        from cglint.rewrite import FileChanged, replace_text

        problems = []
        for change in self.files.values():
            try:
                replace_text(change.path, change.after, change.before)
            except (FileChanged, OSError) as exc:
                problems.append(str(exc))
        return problems


def proposals(result: CheckResult) -> dict[Finding, Edit]:
    """The fix each finding's rule proposes (before overlap and validation)."""
    contexts: dict[int, FixContext] = {}
    found: dict[Finding, Edit] = {}
    hits = result.hits
    texts = {h.module.display: h.module.file.text for h in hits.values()}
    lines = {path: baseline.code_lines(text) for path, text in texts.items()}
    findings = [f for f in result.findings if f in hits]
    for finding, key in zip(findings, baseline.keys(findings, lines=lambda p: lines.get(p, []))):
        hit = hits[finding]
        ctx = contexts.setdefault(id(hit.module), FixContext(hit.module.tree))
        ctx.details = dict(hit.details)
        try:
            proposal = hit.rule.fix(hit.node, ctx)
        except Exception:  # noqa: BLE001 - a broken fix must not cost the user the check
            proposal = None
        if proposal is None:
            continue
        pairs = proposal.items() if isinstance(proposal, dict) else [(hit.node, proposal)]
        around = {id(hit.node), *(id(a) for a in ctx.ancestors(hit.node))}
        found[finding] = Edit(finding, key, {id(old): (old, new) for old, new in pairs}, ctx, {id(old) for old, _ in pairs} & around)
    return found


def fixable(result: CheckResult) -> set[Finding]:
    return set(proposals(result))


class _Replace(cst.CSTTransformer):
    def __init__(self, changes: dict):
        super().__init__()
        self.changes = changes

    def on_leave(self, original_node, updated_node):
        change = self.changes.get(id(original_node))
        return updated_node if change is None else change[1]


def _disjoint(edits: list[Edit]) -> list[Edit]:
    """The edits of one file that touch disjoint subtrees (the rest waits for the next pass)."""
    taken: set[int] = set()
    above: set[int] = set()
    chosen = []
    for edit in edits:
        ids = set(edit.changes)
        lineage = {id(a) for old, _ in edit.changes.values() for a in edit.ctx.ancestors(old)}
        if ids & (taken | above) or lineage & taken:
            continue
        taken |= ids
        above |= lineage
        chosen.append(edit)
    return chosen


def _apply(tree: cst.Module, edits: list[Edit]) -> Optional[str]:
    changes = {k: v for edit in edits for k, v in edit.changes.items()}
    try:
        fixed = tree.visit(_Replace(changes))
        text = fixed.code
    except Exception:  # noqa: BLE001 - libcst refuses a replacement: no fix
        return None
    if isinstance(source.parse(text), source.SourceError) or source.syntax_check(text) is not None:
        return None
    positions = MetadataWrapper(fixed, unsafe_skip_copy=True).resolve(PositionProvider)
    for edit in edits:
        replaced = [new for key, (_, new) in edit.changes.items() if key in edit.home]
        edit.spans = [(p.start.line, p.end.line) for new in replaced if (p := positions.get(new)) is not None]
    return text


def _rejected(before: CheckResult, after: CheckResult, edits: list[Edit]) -> list[Edit]:
    """Edits whose result is not clean: a finding of their rule is still where they changed the
    code, their file has more findings of that rule than the fixes leave, or any file gained one."""
    old = Counter((f.path, f.code) for f in before.findings)
    new = Counter((f.path, f.code) for f in after.findings)
    planned = Counter((e.finding.path, e.finding.code) for e in edits)
    if any(new[key] > old[key] for key in new if key not in planned):
        return list(edits)  # a finding appeared where nothing was fixed: drop the whole pass
    bad = []
    for edit in edits:
        key = (edit.finding.path, edit.finding.code)
        stays = any(
            (f.path, f.code) == key and f.line <= end and f.end_line >= start
            for f in after.findings for start, end in edit.spans
        )
        if stays or new[key] > old[key] - planned[key]:
            bad.append(edit)
    return bad


def fix_files(
    files: list[Path], config: Config, selection: Optional[Selection] = None, missing: Iterable[Path] = (), sources: Optional[dict[Path, str]] = None
) -> FixOutcome:
    """Fix `files` (and the modules their captures reach) in memory; `sources` gives texts not on disk."""
    missing = list(missing)
    texts: dict[Path, str] = {p.resolve(): t for p, t in (sources or {}).items()}  # resolved path -> current text
    result = check_files(files, config, selection, missing, sources=_sources(texts, files), whole_modules=True)
    done: dict[Path, FileFix] = {}
    rejected: set[tuple] = set()
    for _ in range(MAX_PASSES):
        by_module: dict[int, tuple] = {}
        for finding, edit in proposals(result).items():
            if edit.key not in rejected:
                module = result.hits[finding].module
                by_module.setdefault(id(module), (module, []))[1].append(edit)
        if not by_module:
            break
        fixed: dict[Path, tuple] = {}
        applied: list[Edit] = []
        for module, edits in by_module.values():
            chosen = _disjoint(sorted(edits, key=lambda e: e.finding.sort_key))
            text = _apply(module.tree, chosen)
            if text is None:  # reject the fixes that break the file alone (all of them if none does)
                culprits = {e.key for e in chosen if _apply(module.tree, [e]) is None}
                rejected |= culprits or {e.key for e in chosen}
                continue
            fixed[module.file.path.resolve()] = (module, text, chosen)
            applied += chosen
        if not fixed:
            continue
        candidate = {**texts, **{path: text for path, (_, text, _) in fixed.items()}}
        after = check_files(files, config, selection, missing, sources=_sources(candidate, files), whole_modules=True)
        bad = _rejected(result, after, applied)
        if bad:
            rejected |= {e.key for e in bad}
            continue
        texts, result = candidate, after
        for path, (module, text, chosen) in fixed.items():
            change = done.setdefault(path, FileFix(path, module.display, module.file.text, text))
            change.after = text
            change.fixed += len(chosen)
    return FixOutcome(result, done)


def _sources(texts: dict[Path, str], files: list[Path]) -> dict[Path, str]:
    """Texts by resolved path, and by the path as given for the files checked."""
    return {**texts, **{p: texts[p.resolve()] for p in files if p.resolve() in texts}}


def fix_paths(paths: Iterable[Path], config: Config, selection: Optional[Selection] = None, force_exclude: bool = False) -> FixOutcome:
    from cglint.discovery import discover

    files, missing = discover(list(paths), config.excludes, config.root, force_exclude)
    return fix_files(files, config, selection, missing)
