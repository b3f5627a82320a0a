"""Turning an exception raised during capture into a finding at the user's line.

The first error of a capture is the cause; CUDA then answers every later call, and the
capture_end, with "operation failed due to a previous error during capture" (901). Those
cascade errors are recognised so that they never replace the cause.
"""
from __future__ import annotations

import re
from types import FrameType, TracebackType
from typing import Optional

from cglint import vocabulary
from cglint.verify.findings import frames
from cglint.verify.findings import rule_codes as rc

_ERRORS = vocabulary.capture_errors()
# CUDA's answer to every call after the one that broke the capture (cudaErrorStreamCaptureInvalidated).
CASCADE = "operation failed due to a previous error during capture"


def text_of(exc: BaseException) -> str:
    """str(exc), even for exceptions whose __str__ raises."""
    try:
        return str(exc)
    except Exception:  # noqa: BLE001
        return f"<{type(exc).__name__} whose message cannot be shown>"


def is_cascade(exc: BaseException) -> bool:
    return CASCADE in text_of(exc)


def first_line(exc: BaseException) -> str:
    text = text_of(exc).strip().splitlines()
    head = next((line for line in text if line.strip()), "")
    head = re.sub(r"\s+", " ", head)
    return (f"{type(exc).__name__}: {head}" if head else type(exc).__name__)[:300]


def meaning(exc: BaseException) -> tuple[str, str]:
    """(rule code, explanation) of a capture error by its text."""
    text = text_of(exc)
    for error in _ERRORS:
        if error.text in text:
            return error.code, error.meaning
    return rc.CAPTURE_FAILED, "an error was raised while capturing"


def library_frames(tb: Optional[TracebackType]) -> Optional[FrameType]:
    """The innermost frame of a traceback (to look for library functions with their own rule)."""
    last = None
    while tb is not None:
        last, tb = tb.tb_frame, tb.tb_next
    return last


def where_raised(tb: Optional[TracebackType]) -> Optional[tuple[frames.Where, FrameType]]:
    """The innermost user line of a traceback, with the column of the raising expression."""
    found = None
    while tb is not None:
        if frames.is_user_code(tb.tb_frame.f_code):
            found = tb
        tb = tb.tb_next
    if found is None:
        return None
    frame = found.tb_frame
    where = frames.where(frame, lasti=found.tb_lasti, line=found.tb_lineno)
    return where, frame

