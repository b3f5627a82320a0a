"""The two ways of verifying: on a GPU (real captures) or on the CPU (traces only).

Both backends have the same interface; `select` is the one place that picks one, for the
API, for scripts and for the pytest plugin alike. Nothing here imports torch.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Optional, Protocol

if TYPE_CHECKING:
    from cglint.verify.findings.recorder import Recorder
    from cglint.verify.result import VerifyReport
    from cglint.verify.run.session import Session


@dataclass(frozen=True)
class Options:
    """How `cglint.verify_function(fn, ...)` checks a function (see its docstring)."""

    replays: int = 3
    rtol: float = 1e-4
    atol: float = 1e-5
    warmup: int = 3
    timing: bool = True
    timing_iters: int = 20
    measure_overhead: bool = False


class Backend(Protocol):
    mode: str  # "gpu" or "cpu", as reports and the JSON name it
    trace_phase: str  # how observations of the traced eager passes are labelled
    script_notes: tuple[str, ...]  # what a whole-script run says about the mode

    def verify_function(self, fn: Callable[..., Any], sample: tuple, make_inputs: Optional[Callable[[], Any]],
                        recorder: "Recorder", report: "VerifyReport", options: Options) -> None:
        """Check one function on its sample inputs, adding to `recorder` and `report`."""

    def install(self, session: "Session") -> None:
        """Instrument every capture of the running program (a script, a pytest session)."""

    def uninstall(self) -> None:
        """Undo `install`."""


def select(gpu: bool) -> Backend:
    """The GPU backend when there is a device to capture on, else the CPU trace."""
    if gpu:
        from cglint.verify.gpu_backend import GpuBackend

        return GpuBackend()
    from cglint.verify.cpu.backend import CpuBackend

    return CpuBackend()
