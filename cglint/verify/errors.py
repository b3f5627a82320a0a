"""Turning an exception raised during capture into a finding at the user's line.

The first error of a capture is the cause; CUDA then answers every later call, and the
capture_end, with "operation failed due to a previous error during capture" (901). Those
cascade errors are recognised so that they never replace the cause.
"""
from __future__ import annotations

import re
from types import FrameType, TracebackType
from typing import Optional

from cglint.verify import frames

CASCADE = "operation failed due to a previous error during capture"

# (text in the error, rule code, what it means); first match wins.
_PATTERNS: tuple[tuple[str, str, str], ...] = (
    ("called a synchronizing CUDA operation", "CG190", "sync debug mode caught a synchronizing operation"),
    ("Cannot copy between CPU and CUDA tensors during CUDA graph capture", "CG402",
     "PyTorch refused a copy between pageable host memory and the device"),
    ("Offset increment outside graph capture", "CG306", "the CUDA generator was used outside the capturing stream"),
    ("CUDAGeneratorImpl", "CG306", "RNG state was read or set during capture"),
    ("RNG within data-dependent conditional", "CG306", "RNG inside a conditional node"),
    ("operation not permitted when stream is capturing", "CG190", "CUDA refused a call during capture (error 900)"),
    ("during CUDA graph capture", "CG190", "PyTorch refused an operation during capture"),
    ("capturing stream has unjoined work", "CG991", "work forked to another stream was not joined back (error 904)"),
    ("dependency created on uncaptured work", "CG991", "the capture waited on work outside it (error 905)"),
    ("merge of separate capture sequences", "CG991", "two captures were merged (error 902)"),
    ("legacy stream depend on a capturing blocking stream", "CG991", "the default stream was used during capture (error 906)"),
    ("not ended in the same stream", "CG991", "the capture ended on another stream (error 903)"),
    ("Capture must end on the same stream", "CG991", "the capture ended on another stream"),
    ("must be captured on a non-default stream", "CG991", "capture on the default stream"),
    ("last recorded in a capturing stream", "CG104", "an event recorded in the capture was queried (error 907)"),
    ("captured event", "CG104", "an event recorded in the capture was queried (error 907)"),
    ("wrong thread", "CG991", "the capture was ended from another thread (error 908)"),
    (CASCADE, "CG991", "the capture had been invalidated by an earlier error"),
)


def is_cascade(exc: BaseException) -> bool:
    return CASCADE in str(exc)


def first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    head = next((line for line in text if line.strip()), "")
    head = re.sub(r"\s+", " ", head)
    return f"{type(exc).__name__}: {head}"[:300]


def meaning(exc: BaseException) -> tuple[str, str]:
    """(rule code, explanation) of a capture error by its text."""
    text = str(exc)
    for needle, code, what in _PATTERNS:
        if needle in text:
            return code, what
    return "CG991", "an error was raised while capturing"


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
