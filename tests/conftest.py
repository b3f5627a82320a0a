"""Two tiers: `python -m pytest` runs the fast tier (under a minute on a 2-core machine) and
deselects the tests marked `slow`; `python -m pytest --run-slow` runs everything (CI and the
README do), `python -m pytest -m slow` only the slow tests. Any `-m` expression replaces the
default one.

The slow tests are listed here, by file, rather than marked in their modules, so the list is
one place to keep: a test is slow when it takes over a second or so on a busy 2-core machine.
A listed test that no longer exists stops the run (rename it here too), and a fast-tier test
that took over SLOW_AFTER seconds is named at the end of the run: list it here.
"""
from __future__ import annotations

from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
# Seconds of one call on a busy machine. The first in-process verifier test of a run takes
# about 5 s (host tracing over torch's lazy imports), whichever it is.
SLOW_AFTER = 8.0

# Files whose every test is slow; the fast tier does not even import them.
SLOW_FILES = {
    # Property-based fuzzing (hypothesis, hypothesmith); one test checks in subprocesses
    # under several hash seeds. Importing it builds a Python grammar (seconds).
    "test_fuzz.py",
    # Each test runs a CUDA script under `cglint verify` in CPU emulation (15-20 s).
    "test_verify_emulated.py",
    # `cglint verify` in subprocesses: timeouts, signals, crashes, closed streams.
    "test_verify_safety.py",
    # Real captures on a GPU (they skip without one).
    "test_verify_gpu.py",
    "test_verify_compiled_gpu.py",
    # Each test starts the editor server and talks to it over LSP (5-10 s).
    "test_server.py",
}

# Slow tests of files that also hold fast ones: file -> test functions (every parameter set).
SLOW_TESTS = {
    # A script run end to end under `cglint verify` (CPU trace mode, or its pytest plugin in
    # a subprocess): 5-40 s each.
    "test_capture_block_writes.py": {"test_verify_agrees_with_check"},
    "test_replay_guards.py": {
        "test_a_temperature_a_method_changes_between_replays",
        "test_eval_after_capture_with_a_branch_on_training_and_a_dropout",
        "test_a_global_set_through_global_in_another_module",
        "test_config_fields_dict_entries_list_lengths_and_closure_cells",
        "test_parameters_and_buffers_rebound_after_capture_at_the_rebinding_line",
        "test_a_buffer_rebound_inside_the_captured_forward",
        "test_a_graphed_callable_checks_its_guards_on_every_call",
        "test_clean_counterparts_are_silent",
        "test_a_value_changed_after_the_last_replay_is_not_a_finding",
        "test_values_only_read_in_a_branch_not_taken_are_not_guarded",
        "test_a_capture_loop_variable_keys_its_graphs_and_is_not_a_guard",
        "test_graphs_captured_at_one_site_each_report_their_own_replay",
    },
    "test_verify_compiled.py": {
        "test_verify_on_the_cpu_reports_dynamos_graph_breaks_recompiles_and_shapes_of_the_decode_loop",
        "test_verify_on_the_cpu_finds_nothing_in_the_clean_decode_loop_and_says_what_it_could_not_see",
        "test_a_compiled_module_keeps_its_type_and_an_earlier_output_read_later_is_reported",  # torch.compile
    },
    "test_verify_cpu.py": {
        "test_plugin_keeps_the_findings_of_a_test_whose_process_dies",
        "test_plugin_fails_unsafe_captures_with_the_option",
        "test_plugin_is_inert_without_the_option",
        "test_raw_capture_left_open_by_a_crash_is_closed",
        "test_a_generator_registered_with_the_graph_is_not_a_finding",
        "test_clean_script_exits_zero",
        "test_script_findings_in_json",
        "test_script_exit_status_is_reported",
        "test_script_crash_is_reported_and_not_swallowed",
        "test_importing_the_plugin_and_the_package_does_not_import_torch",  # a fresh interpreter
    },
    "test_verify_reach.py": {
        "test_the_file_is_written_however_the_script_ends",
        "test_reach_root_selects_a_tree_installed_elsewhere",
        "test_every_kind_of_call_in_a_capture_is_saved_with_its_qualname",
        "test_a_tree_outside_the_working_directory_is_named_by_its_absolute_path",
        "test_a_capture_the_script_dies_in_keeps_what_ran_before",
    },
    # Each runs a small program under `cglint verify` in CPU trace mode (5-12 s).
    "test_verify_replay_writers.py": {
        "test_the_write_between_replays_is_located",
        "test_the_correct_twin_is_silent",
    },
    "test_verify_replay_divergence.py": {
        "test_each_marked_line_is_reported_and_the_verdict_holds",
        "test_class_attributes_name_the_write",
        "test_partials_and_module_state_say_what_changed",
        "test_rebound_inputs_and_advanced_state_say_what_the_graph_keeps",
    },
    # torch.compile runs for real.
    "test_compiled.py": {
        "test_torch_rejects_under_fullgraph_what_cg911_reports",
        "test_torch_does_not_trace_into_an_is_compiling_guard",
    },
    "test_guarded_changes.py": {"test_torch_recompiles_exactly_where_cg603_reports"},
    # Other processes: cglint in a fresh interpreter, pre-commit, flake8, a metadata build.
    "test_precommit.py": {"test_precommit_hook_fails_on_a_hazard_then_passes_once_fixed"},
    "test_fix_safety.py": {
        "test_run_killed_between_two_writes_leaves_every_file_old_or_new",
        "test_run_killed_at_any_moment_leaves_every_file_old_or_new",
    },
    "test_tools.py": {"test_flake8_reports_cg_codes", "test_flake8_respects_cglint_configuration_and_reads_stdin"},
    "test_readme.py": {"test_example_output_is_what_the_command_prints", "test_design_doc_describes_the_json_the_checker_writes"},
    "test_cli.py": {
        "test_static_check_never_imports_torch",
        "test_rule_is_rendered_on_a_terminal_and_plain_markdown_when_piped",
        "test_console_script_runs",
        "test_a_reader_that_leaves_early_gets_no_traceback",
    },
    "test_catalogue.py": {"test_a_file_without_captures_is_checked_without_loading_libcst_or_rich"},
    "test_packaging.py": {"test_building_the_metadata_warns_of_nothing"},
    "test_hostile_inputs.py": {
        "test_two_processes_on_the_same_tree_at_once",
        "test_a_named_pipe_is_reported_never_read",
        "test_corrupt_cache_entries_are_ignored",
        "test_read_only_cache_folder",
        "test_cache_that_cannot_be_written",
        # Large inputs.
        "test_file_of_50000_lines_with_a_capture",
        "test_deep_nesting_is_reported_never_a_crash",
        "test_positions_by_statement_equal_whole_module_positions",
    },
    # Whole corpora: the real-code excerpts, the fixtures, the GPU-confirmed programs,
    # cglint's own source.
    "test_demand_parsing.py": {
        "test_demand_driven_parsing_equals_parsing_every_file",
        "test_demand_driven_parsing_equals_parsing_every_file_on_real_code",
        "test_statements_parsed_alone_equal_a_whole_parse_around_a_module_level_capture",
        "test_functions_parsed_alone_equal_a_whole_parse",
        "test_functions_parsed_alone_equal_a_whole_parse_on_real_code",
    },
    "test_fix.py": {"test_fixing_the_fixtures_leaves_nothing_fixable_and_is_idempotent"},
    "test_fixtures.py": {"test_every_fixture_finding_names_its_capture_and_the_trace_from_it"},
    "test_formats.py": {"test_sarif_validates_against_the_official_schema", "test_sarif_messages_are_sentences_the_fix_follows"},
    "test_silent_divergence.py": {
        "test_gpu_confirmed_program_gets_exactly_its_finding",
        "test_a_folder_of_scripts_is_checked_as_separate_programs",
    },
    # (test_no_import_cycles stays fast: it is what an edit of cglint/ breaks.)
    "test_import_graph.py": {"test_the_graph_sees_lazy_imports_and_skips_type_only_ones"},
    # mypy over the package: about a minute with a cold cache, as in CI (ruff stays fast).
    "test_repository_lint.py": {"test_mypy_finds_nothing", "test_cglint_finds_nothing_in_its_own_sources"},
}

_FAST_ONLY = pytest.StashKey[bool]()
_too_slow: list[tuple[float, str]] = []  # (seconds, node id) of fast-tier calls over SLOW_AFTER


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--run-slow", action="store_true", help="run the slow tests too (tests/conftest.py lists them)")


def pytest_configure(config: pytest.Config) -> None:
    fast_only = not config.getoption("--run-slow") and not config.option.markexpr
    if fast_only:
        config.option.markexpr = "not slow"
    config.stash[_FAST_ONLY] = fast_only


def pytest_report_header(config: pytest.Config) -> str | None:
    if config.stash[_FAST_ONLY]:
        return "fast tier: slow tests deselected (--run-slow runs everything, -m slow only them)"
    return None


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    # A file named on the command line is collected whatever this says (and then deselected).
    if config.stash[_FAST_ONLY] and collection_path.parent == HERE and collection_path.name in SLOW_FILES:
        return True
    return None


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    seen: dict[str, set[str]] = {}
    for item in items:
        path = item.path
        if path.parent != HERE:
            continue
        name = getattr(item, "originalname", item.name)
        seen.setdefault(path.name, set()).add(name)
        if path.name in SLOW_FILES or name in SLOW_TESTS.get(path.name, ()):
            item.add_marker(pytest.mark.slow)
    _check_the_list(config, seen)


def _check_the_list(config: pytest.Config, seen: dict[str, set[str]]) -> None:
    """A listed test missing from a file collected whole was renamed or removed."""
    if config.getoption("lf", False):
        return  # --last-failed collects part of a file
    partial = {Path(arg.split("::")[0]).name for arg in config.args if "::" in arg}
    missing = [f"tests/{file}" for file in sorted(SLOW_FILES | set(SLOW_TESTS)) if not (HERE / file).is_file()]
    missing += [
        f"tests/{file}::{name}"
        for file, names in sorted(SLOW_TESTS.items())
        if file in seen and file not in partial
        for name in sorted(names - seen[file])
    ]
    if missing:
        raise pytest.UsageError(
            "tests/conftest.py lists slow tests that do not exist (renamed or removed? "
            "update SLOW_FILES or SLOW_TESTS there): " + ", ".join(missing)
        )


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.when == "call" and report.duration > SLOW_AFTER and "slow" not in report.keywords:
        _too_slow.append((report.duration, report.nodeid))


def pytest_terminal_summary(terminalreporter, config: pytest.Config) -> None:
    if _too_slow:
        terminalreporter.section("tests of the fast tier slower than %g s" % SLOW_AFTER)
        for duration, nodeid in sorted(_too_slow, reverse=True):
            terminalreporter.write_line(f"{duration:6.1f}s {nodeid}  (list it in tests/conftest.py)")
