"""pytest plugin: `pytest --cglint-verify` fails tests whose CUDA-graph captures are unsafe.

Loaded into every pytest session of an environment with cglint installed, so it imports
nothing heavy: torch and the instrumentation load only when the option or the marker is
used. Also provides the `cglint_verify` fixture (verify a function explicitly) and the
`cglint_verify` marker (instrument the captures of one test without the option).
"""
from __future__ import annotations

from typing import Any

import pytest

_MARKER = "cglint_verify"


def pytest_addoption(parser: Any) -> None:
    group = parser.getgroup("cglint", "CUDA-graph safety (cglint)")
    group.addoption("--cglint-verify", action="store_true", default=False,
                    help="instrument every CUDA-graph capture and fail tests whose captures are unsafe")


def pytest_configure(config: Any) -> None:
    config.addinivalue_line("markers", f"{_MARKER}: instrument the CUDA-graph captures of this test (cglint)")


class _Guard:
    """The instrumentation of the session, installed on first use."""

    def __init__(self) -> None:
        self.session: Any = None
        self.backend: Any = None

    def start(self) -> Any:
        if self.session is None:
            import torch

            from cglint.verify import backend
            from cglint.verify import session as sessions

            self.session = sessions.begin(torch.cuda.is_available())
            self.backend = backend.select(self.session.gpu)
            self.backend.install(self.session)
        return self.session

    def stop(self) -> None:
        if self.session is not None:
            from cglint.verify import session as sessions

            self.backend.uninstall()
            sessions.end()
            self.session = self.backend = None


_guard = _Guard()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: Any) -> Any:
    wanted = item.config.getoption("--cglint-verify") or item.get_closest_marker(_MARKER) is not None
    if not wanted:
        yield
        return
    session = _guard.start()
    before = len(session.recorders)
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
        from cglint.verify.api import verify

        report = verify(fn, sample_args, **options)
        if check and not report.ok:
            pytest.fail(report.summary(), pytrace=False)
        return report

    return run
