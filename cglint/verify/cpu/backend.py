"""The CPU backend: traced eager passes of a function, and for scripts the emulated CUDA of
cpu/shims. No real capture happens, so the report lists what needed a GPU."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Optional

from cglint.verify import inputs
from cglint.verify.compiled import regions
from cglint.verify.cpu import shims
from cglint.verify.guards import watchers
from cglint.verify.findings.recorder import Recorder
from cglint.verify.result import VerifyReport
from cglint.verify.run.session import Session
from cglint.verify.trace_passes import second_pass, traced

if TYPE_CHECKING:
    from cglint.verify.backend import Options

NOT_CHECKED = (
    "trial capture: capture errors, sync debug mode, stream and event hooks (needs a GPU)",
    "replay against eager on fresh inputs (needs a GPU)",
    "graph pool memory and eager-versus-replay time (needs a GPU)",
    "device-to-host copies inside library code (every tensor is on the CPU in trace mode)",
)
SCRIPT_NOTE = (
    "no CUDA device: CPU trace mode with CUDA emulated on the CPU (\"cuda\" devices, .cuda(), streams, "
    "events, generators and graphs run on the CPU). Each captured region ran once on the CPU under the "
    "tracer (syncing operators, host calls, host RNG, data-dependent branches), and each replay() checked "
    "the Python values the capture read and the parameters and buffers it used, and the tensors it read from "
    "dicts, lists and plain objects (replay guards), then ran "
    "the capture's operators again on the tensors it recorded, so outputs read after a replay change as on "
    "a GPU (Python values stay as the capture saw them); not checked: real capture errors, replay results "
    "against eager runs, static inputs named by the capture site rebound or freed before a replay, pool "
    "memory and timing. Run on a "
    "GPU machine for those."
)


class CpuBackend:
    mode = "cpu"
    trace_phase = "CPU trace"
    script_notes: tuple[str, ...] = (SCRIPT_NOTE,)

    def verify_function(self, fn: Callable[..., Any], sample: tuple, make_inputs: Optional[Callable[[], Any]],
                        recorder: Recorder, report: VerifyReport, options: "Options") -> None:
        static = inputs.clone(sample)
        fn(*static)  # one plain call first: lazy initialisation is not a difference between inputs
        _, first = traced(fn, static, recorder, gpu=False)
        second_pass(fn, sample, make_inputs, recorder, first, report, gpu=False)
        report.skipped.extend(NOT_CHECKED)

    def install(self, session: Session) -> None:
        shims.install(session)
        watchers.install()
        regions.install(session)

    def uninstall(self) -> None:
        regions.uninstall()
        watchers.uninstall()
        shims.uninstall()
