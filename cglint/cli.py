"""The command line: `cglint check`, `cglint reach`, `cglint rule CODE`, `cglint rules`, `cglint verify`, `cglint server`.

Exit codes (as ruff): 0 no findings, 1 findings, 2 usage, configuration or internal error.
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Optional, Sequence, TextIO

from cglint import __version__

EXIT_CLEAN, EXIT_FINDINGS, EXIT_ERROR = 0, 1, 2
EXIT_INTERRUPTED = 130  # 128 + SIGINT: the status shells give a command stopped by Ctrl-C


class UsageError(Exception):
    pass


def _codes(value: str) -> list[str]:
    return [part.strip() for part in value.split(",") if part.strip()]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="cglint", description="Find CUDA-Graph hazards in PyTorch code.")
    parser.add_argument("--version", action="version", version=f"cglint {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")

    check = commands.add_parser("check", help="check files or folders statically (default: .)")
    check.add_argument("paths", nargs="*", metavar="PATH")
    check.add_argument("--select", type=_codes, help="codes, prefixes or categories to report (comma-separated)")
    check.add_argument("--extend-select", type=_codes, default=[], help="add to the selection")
    check.add_argument("--ignore", type=_codes, default=[], help="codes, prefixes or categories not to report")
    check.add_argument("--format", "--output-format", dest="format", choices=("text", "concise", "json", "sarif", "github"), default=None, help="report format (default: text, or $CGLINT_OUTPUT_FORMAT); --output-format is ruff's spelling")
    check.add_argument("--output-file", type=Path, help="write the report to this file")
    check.add_argument("--statistics", action="store_true", help="show counts per rule")
    check.add_argument("--exit-zero", action="store_true", help="exit 0 even when there are findings")
    check.add_argument("--config", type=Path, help="configuration file (pyproject.toml or cglint.toml)")
    check.add_argument("--force-exclude", action="store_true", help="apply exclusions to files named explicitly too")
    check.add_argument("--fix", action="store_true", help="apply safe automatic fixes, then report what is left")
    check.add_argument("--diff", action="store_true", help="show the safe fixes as a diff instead of writing them (exit 1 if any)")
    check.add_argument("--add-noqa", action="store_true", help="add `# noqa: CODE` comments for every current finding")
    check.add_argument("--baseline", type=Path, metavar="FILE", help="report only findings not recorded in FILE")
    check.add_argument("--update-baseline", action="store_true", help="record the current findings in the --baseline FILE")
    check.add_argument("--no-cache", action="store_true", help="do not read or write the result cache")
    check.add_argument("--jobs", "-j", type=int, default=None, metavar="N", help="accepted for compatibility: the check runs in one process")
    check.add_argument("--color", choices=("auto", "always", "never"), default="auto")

    reach = commands.add_parser("reach", help="list, for each capture site, the functions it reaches and the calls it could not follow")
    reach.add_argument("paths", nargs="*", metavar="PATH")
    reach.add_argument("--format", "--output-format", dest="format", choices=("text", "json"), default="text", help="report format (default: text)")
    reach.add_argument("--output-file", type=Path, help="write the report to this file")
    reach.add_argument("--config", type=Path, help="configuration file (pyproject.toml or cglint.toml)")
    reach.add_argument("--force-exclude", action="store_true", help="apply exclusions to files named explicitly too")

    rule = commands.add_parser("rule", help="explain one rule")
    rule.add_argument("code", metavar="CODE|NAME", help="a rule's code (CG101) or name (tensor-to-scalar)")
    commands.add_parser("rules", help="list every rule")

    commands.add_parser("server", help="serve diagnostics and fixes to an editor (Language Server Protocol over stdio)")

    verify = commands.add_parser("verify", help="run a script with every CUDA-graph capture instrumented", add_help=False)
    verify.add_argument("rest", nargs=argparse.REMAINDER)
    return parser


def run() -> None:
    """The `cglint` command: `main`, then an exit that leaves freeing memory to the system."""
    from cglint import check

    check.KEEP_TREES = True
    try:
        code = main()
        sys.stdout.flush()  # here, where a closed pipe can still be handled
    except BrokenPipeError:
        # `cglint verify --help | head`: the reader left (main() handles the other commands);
        # stop quietly, without a second error when Python flushes stdout at exit.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        os._exit(EXIT_CLEAN)
    if check._kept:  # a large run's trees would take longer to free than the run took to report
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):  # a closed pipe: nothing more can be said
                pass
        os._exit(code)
    sys.exit(code)


def main(argv: Optional[Sequence[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "verify":
        from cglint.verify.run.cli import main as verify_main

        return verify_main(argv[1:])
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        if args.command == "check":
            return run_check(args)
        if args.command == "reach":
            return run_reach(args)
        if args.command == "rule":
            return run_rule(args.code, sys.stdout)
        if args.command == "rules":
            return run_rules(sys.stdout)
        if args.command == "server":
            return run_server()
        parser.print_help()
        return EXIT_ERROR
    except UsageError as exc:
        print(f"cglint: error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        print("cglint: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # Output piped into `head` and friends: stop quietly, as other command-line tools do.
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - silence the flush at exit
        return EXIT_CLEAN


def _configured(args: argparse.Namespace, select=None, extend_select=(), ignore=()):
    """The paths, configuration and selection of `check` or `reach`; a bad one is a usage error."""
    from cglint import catalogue, config as config_module
    from cglint.selection import Selection

    paths = _existing_paths(args.paths)
    for option, selectors in (("--select", select), ("--extend-select", extend_select), ("--ignore", ignore)):
        try:
            catalogue.expand(selectors or [])
        except catalogue.UnknownSelector as exc:
            raise UsageError(f"{option}: {exc}") from None
    try:
        config = config_module.load(args.config, paths[0] if paths[0].exists() else Path("."))
        return paths, config, Selection.of(config, select, list(extend_select), list(ignore))
    except (config_module.ConfigError, catalogue.UnknownSelector) as exc:
        raise UsageError(str(exc)) from None


def run_reach(args: argparse.Namespace) -> int:
    """`cglint reach`: what the checker follows from each capture site (docs/design.md)."""
    from cglint import reach
    from cglint.check import check_paths

    paths, config, selection = _configured(args)
    result = check_paths(paths, config, selection, force_exclude=args.force_exclude, reach=True)
    with _output(args.output_file) as stream:
        if args.format == "json":
            reach.write_json(result.reach, stream, __version__)
        else:
            reach.write_text(result.reach, stream)
    return EXIT_CLEAN


def run_check(args: argparse.Namespace) -> int:
    from cglint import catalogue
    from cglint.check import check_paths
    from cglint.report import FORMATS, write_report

    paths, config, selection = _configured(args, args.select, args.extend_select, args.ignore)
    if args.jobs is not None and args.jobs < 1:
        raise UsageError("--jobs must be at least 1")
    if sum(map(bool, (args.fix, args.diff, args.add_noqa, args.update_baseline))) > 1:
        raise UsageError("use one of --fix, --diff, --add-noqa and --update-baseline at a time")
    if args.update_baseline and args.baseline is None:
        raise UsageError("--update-baseline needs --baseline FILE")
    fmt = args.format or os.environ.get("CGLINT_OUTPUT_FORMAT", "text")
    if fmt not in FORMATS:
        raise UsageError(f"unknown output format {fmt!r} (CGLINT_OUTPUT_FORMAT); use one of {', '.join(FORMATS)}")
    if args.baseline is not None and not args.update_baseline:
        from cglint import baseline

        try:
            baseline.load(args.baseline)  # a usage error before anything is written
        except baseline.BaselineError as exc:
            raise UsageError(str(exc)) from None
    notes: list[str] = []
    if args.fix or args.diff:
        from cglint.fix import fix_paths

        outcome = fix_paths(paths, config, selection, force_exclude=args.force_exclude)
        if args.diff:
            with _output(args.output_file) as stream:
                stream.write(outcome.diff())
            _note(f"Would fix {_count(outcome.fixed)} in {_count(len(outcome.files), 'file')}." if outcome.fixed else "No fixes available.")
            return EXIT_FINDINGS if outcome.fixed and not args.exit_zero else EXIT_CLEAN
        for problem in outcome.write():
            _note(f"warning: {problem}")
        result = outcome.result
        notes.append(f"Fixed {_count(outcome.fixed)} in {_count(len(outcome.files), 'file')}." if outcome.fixed else "Nothing to fix.")
    else:
        result = check_paths(paths, config, selection, force_exclude=args.force_exclude, use_cache=not args.no_cache)
    findings = result.findings
    if args.add_noqa:
        _note(f"Added {_count(add_noqa(findings), 'noqa directive')}.")
        # Said, not assumed: the next run is what the user will see.
        left = check_paths(paths, config, selection, force_exclude=args.force_exclude, use_cache=not args.no_cache).findings
        left = sorted((f for f in left if f.code not in catalogue.ADVISORY), key=lambda f: f.sort_key)
        if not left:
            return EXIT_CLEAN
        _note(f"{_count(len(left))} could not be suppressed with a noqa comment and will still be reported:")
        for f in left:
            why = " (cglint's own diagnostic: fix the file)" if f.code in catalogue.TOOL_DIAGNOSTICS else ""
            _note(f"  {f.path}:{f.line}:{f.column}: {f.code} {f.message}{why}")
        return EXIT_CLEAN if args.exit_zero else EXIT_FINDINGS
    if args.baseline is not None:
        from cglint import baseline

        if args.update_baseline:
            baseline.write(args.baseline, findings)
            _note(f"Recorded {_count(len(findings))} in {args.baseline}.")
            return EXIT_CLEAN
        try:
            findings, known = baseline.new_findings(findings, args.baseline)
        except baseline.BaselineError as exc:
            raise UsageError(str(exc)) from None
        if known:
            notes.append(f"{_count(known)} recorded in {args.baseline} not shown.")
    with _output(args.output_file) as stream:
        color = _use_color(args.color, stream)
        write_report(findings, fmt=fmt, files_checked=result.files_checked, stream=stream, statistics=args.statistics, color=color, coverage=result.coverage)
    for note in notes:
        _note(note)
    if any(f.code not in catalogue.ADVISORY for f in findings) and not args.exit_zero:
        return EXIT_FINDINGS
    return EXIT_CLEAN


def _existing_paths(typed: list[str]) -> list[Path]:
    """The paths to check; one that does not exist is a usage error, as in ruff (a mistyped
    path in a CI step run with --exit-zero must not pass silently). A broken symbolic link
    exists as a name and is reported as an unreadable file (CG001)."""
    for text in typed:
        path = Path(text)
        if not path.exists() and not path.is_symlink():
            raise UsageError(f"path not found: {text}")
    return [Path(text) for text in typed] or [Path(".")]


def _count(n: int, noun: str = "finding") -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def _note(text: str) -> None:
    """What cglint did besides reporting, on stderr: the report on stdout stays machine-readable."""
    print(text, file=sys.stderr)


def add_noqa(findings) -> int:
    """Add `# noqa: CODE` for each finding of a rule (not CG0xx diagnostics); returns how many."""
    from cglint import catalogue, source
    from cglint.rewrite import FileChanged, replace_text
    from cglint.suppress import with_noqa

    rules = catalogue.by_code()
    by_path: dict[str, list] = {}
    for f in findings:
        if f.code not in catalogue.TOOL_DIAGNOSTICS:
            by_path.setdefault(f.path, []).append((f.code, f.line, f.end_line))
            if getattr(rules.get(f.code), "aggregate", False):  # its other hits, one finding
                for r in f.related:
                    by_path.setdefault(r.path, []).append((f.code, r.line, r.line))
    added = 0
    for path, wanted in sorted(by_path.items()):
        loaded = source.load(Path(path), path)
        if isinstance(loaded, source.SourceError):
            continue
        text, count = with_noqa(loaded.text, wanted)
        if count:
            try:
                replace_text(Path(path), text, loaded.text)
            except (FileChanged, OSError) as exc:
                _note(f"warning: {exc}")
                continue
            added += count
    return added


class _output:
    """stdout, or a file written whole at the end (never a half-written report)."""

    def __init__(self, path: Optional[Path]):
        self.path = path

    def __enter__(self) -> TextIO:
        if self.path is None:
            return sys.stdout
        import io

        self._buffer = io.StringIO()
        return self._buffer

    def __exit__(self, *exc) -> None:
        if self.path is not None and exc[0] is None:
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                self.path.write_text(self._buffer.getvalue(), encoding="utf-8")
            except OSError as error:
                raise UsageError(f"cannot write {self.path}: {error}") from None


def _use_color(choice: str, stream: TextIO) -> bool:
    if choice != "auto":
        return choice == "always"
    if os.environ.get("NO_COLOR"):
        return False
    if os.environ.get("FORCE_COLOR"):
        return True
    return stream is sys.stdout and sys.stdout.isatty()


def run_rule(code: str, stream: TextIO) -> int:
    from cglint import catalogue
    from cglint.docs import RuleDoc

    given = code
    # A code, or a rule's name as `cglint rules` shows it (`tensor-to-scalar`), as ruff takes both.
    names = {rule.name: rule.code for rule in catalogue.rule_classes()}
    names.update({name: diagnostic for diagnostic, (name, _) in catalogue.TOOL_DIAGNOSTICS.items()})
    code = names.get(code.strip().lower(), code.strip().upper())
    rule = catalogue.by_code().get(code)
    if rule is None:
        if code in catalogue.TOOL_DIAGNOSTICS:
            name, text = catalogue.TOOL_DIAGNOSTICS[code]
            stream.write(f"{code} {name}: {text}\n")
            return EXIT_CLEAN
        raise UsageError(f"unknown rule {given!r}: give a code (CG101) or a rule name (tensor-to-scalar); `cglint rules` lists them")
    _write_markdown(RuleDoc.of(rule).markdown(), stream)
    return EXIT_CLEAN


def _write_markdown(text: str, stream: TextIO) -> None:
    """Rendered by rich on a terminal (rich honours NO_COLOR and FORCE_COLOR); the
    Markdown itself into a pipe or a file."""
    from rich.console import Console

    console = Console(file=stream, soft_wrap=False, emoji=False)
    if console.is_terminal:
        from rich.markdown import Markdown

        console.print(Markdown(text))
    else:
        stream.write(text)


def run_server() -> int:
    try:
        import pygls  # noqa: F401
    except ImportError:
        raise UsageError('`cglint server` needs pygls: pip install "cglint[server]"') from None
    from cglint.lsp.server import serve

    return serve()


def run_rules(stream: TextIO) -> int:
    from cglint import catalogue

    for code, (name, text) in catalogue.TOOL_DIAGNOSTICS.items():
        stream.write(f"{code}  {'internal':<14} {catalogue.diagnostic_severity(code):<8} {name}: {text}\n")
    for rule in catalogue.rule_classes():
        stream.write(f"{rule.code}  {rule.category:<14} {rule.severity:<8} {rule.name}: {rule.summary}\n")
    return EXIT_CLEAN


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
