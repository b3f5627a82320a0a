"""pytest plugin: `pytest --cglint-verify` fails tests whose CUDA-graph captures are unsafe.

Loaded into every pytest session of an environment with cglint installed, so it imports
nothing heavy: torch and the instrumentation load only when the option or the marker is
used. Also provides the `cglint_verify` fixture (verify a function explicitly) and the
`cglint_verify` marker (instrument the captures of one test without the option).
"""
from __future__ import annotations

import contextlib
import os
import sys
from typing import Any, NoReturn

import pytest

_MARKER = "cglint_verify"


def pytest_addoption(parser: Any) -> None:
    group = parser.getgroup("cglint", "CUDA-graph safety (cglint)")
    group.addoption("--cglint-verify", action="store_true", default=False,
                    help="instrument every CUDA-graph capture and fail tests whose captures are unsafe")
    group.addoption("--cglint-verify-log", default=None, metavar="FILE",
                    help="write each test's findings to FILE (JSON lines) as they are made, so that a test "
                         "whose process dies (a crash, os._exit) keeps them")


def pytest_configure(config: Any) -> None:
    config.addinivalue_line("markers", f"{_MARKER}: instrument the CUDA-graph captures of this test (cglint)")


class _Guard:
    """The instrumentation of the session, installed on first use.

    The findings of the running test are written out as they are made (to the log file,
    and to the terminal when the test calls os._exit), so a test that ends the process
    keeps them: pytest itself would only report a crashed worker, or nothing.
    """

    def __init__(self) -> None:
        self.session: Any = None
        self.backend: Any = None
        self.log: Any = None  # events.Writer of --cglint-verify-log
        self.test: Any = None  # (node id, recorders before it) of the running test
        self.config: Any = None

    def start(self, log_path: Any = None) -> Any:
        if self.session is None:
            import torch

            from cglint.verify import backend
            from cglint.verify.run import events
            from cglint.verify.run import session as sessions

            self.log = events.Writer(str(log_path)) if log_path else None
            self.session = sessions.begin(torch.cuda.is_available(), listener=self._publish if self.log else None)
            self.backend = backend.select(self.session.gpu)
            self.backend.install(self.session)
        return self.session

    def _findings(self) -> list:
        return self.session.findings(since=self.test[1]) if self.test else []

    def _publish(self, session: Any) -> None:
        if self.test is not None and self.log is not None:
            self.log.write("test", {"test": self.test[0], "findings": [f.to_json() for f in self._findings()],
                                    "captures": [c.to_json() for c in session.captures()]})

    @contextlib.contextmanager
    def running(self, nodeid: str, config: Any) -> Any:
        """While a test runs: its findings stream out, and os._exit tells them first."""
        self.test, self.config = (nodeid, len(self.session.recorders)), config
        real_exit = os._exit

        def exit_now(status: int) -> NoReturn:  # os._exit's name: a caller may pass it by keyword
            self._publish(self.session)
            bad = [f for f in self._findings() if f.severity in ("error", "warning")]
            if bad:
                capture = self.config.pluginmanager.getplugin("capturemanager") if self.config else None
                if capture is not None:  # pytest holds the test's output: write past it
                    capture.suspend_global_capture(in_=True)
                stream = sys.stderr
                if stream is not None:
                    stream.write(f"\ncglint: {nodeid} called os._exit({status}); its findings:\n"
                                 + "\n".join(_line(f) for f in bad) + "\n")
                    stream.flush()
            real_exit(status)

        os._exit = exit_now
        try:
            yield
        finally:
            os._exit = real_exit
            self._publish(self.session)
            self.test = None

    def stop(self) -> None:
        if self.session is not None:
            from cglint.verify.run import session as sessions

            self.backend.uninstall()
            sessions.end()
            self.session = self.backend = self.log = None


_guard = _Guard()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: Any) -> Any:
    wanted = item.config.getoption("--cglint-verify") or item.get_closest_marker(_MARKER) is not None
    if not wanted:
        yield
        return
    session = _guard.start(item.config.getoption("--cglint-verify-log"))
    before = len(session.recorders)
    with _guard.running(item.nodeid, item.config):
        outcome = yield
        session.close_open(None)
    bad = [f for f in session.findings(since=before) if f.severity in ("error", "warning")]
    if not bad:
        return
    message = "cglint: CUDA-graph capture is not safe:\n" + "\n".join(_line(f) for f in bad)
    if outcome.excinfo is not None:
        item.add_report_section("call", "cglint", message)  # keep the test's own error, add the findings
    else:
        force = getattr(outcome, "force_exception", None)
        if force is not None:
            force(pytest.fail.Exception(message, pytrace=False))
        else:  # pluggy < 1.1
            outcome.force_result(None)
            item.add_report_section("call", "cglint", message)
            raise pytest.fail.Exception(message, pytrace=False)


def pytest_unconfigure(config: Any) -> None:
    _guard.stop()


def _line(finding: Any) -> str:
    return f"  {finding.path}:{finding.line}:{finding.column}: {finding.code} {finding.message}"


@pytest.fixture
def cglint_verify() -> Any:
    """Verify a function: `report = cglint_verify(fn, sample_args, **options)`.

    Fails the test when the report has error or warning findings (pass `check=False` to
    only get the report).
    """

    def run(fn: Any, sample_args: Any = (), *, check: bool = True, **options: Any) -> Any:
        from cglint.verify.api import verify_function

        report = verify_function(fn, sample_args, **options)
        if check and not report.ok:
            pytest.fail(report.summary(), pytrace=False)
        return report

    return run
