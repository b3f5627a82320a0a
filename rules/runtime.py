"""Rules that only the runtime verifier reports (`cglint verify`, the API, the pytest plugin).

They name what a real capture or replay showed and no static rule covers. They have
no examples: the static checker never produces them.
"""
from __future__ import annotations

from cglint.rule import RUNTIME, Rule


class RuntimeSync(Rule):
    code = "CG190"
    name = "runtime-sync"
    category = "sync"
    severity = "error"
    scope = RUNTIME
    summary = "A synchronizing operation ran inside a capture that no static rule names."
    message = "synchronizing operation during capture: {what}"
    fix_hint = "Find the host read behind this operation and keep the value on the device."
    why = """A library call or operator synchronized with the host while the stream was being
    captured. CUDA refuses the synchronization (cudaErrorStreamCaptureUnsupported) and the whole
    capture is invalidated."""


class RuntimeControlFlow(Rule):
    code = "CG290"
    name = "input-dependent-ops"
    category = "control-flow"
    severity = "error"
    scope = RUNTIME
    summary = "Two inputs of the same shape ran different operator sequences."
    message = "operator sequence depends on the input data: {what}"
    fix_hint = "Remove the data-dependent branch (torch.where, masking) or capture one graph per path."
    why = """A graph records the operators of one run. When a second input of the same shapes takes
    another path through Python, replaying the graph silently runs the first path for it."""


class RuntimeStaleInput(Rule):
    code = "CG490"
    name = "captured-tensor-gone"
    category = "realloc"
    severity = "error"
    scope = RUNTIME
    summary = "A tensor the graph reads was rebound or freed before a replay."
    message = "tensor read by the graph is gone before replay: {what}"
    fix_hint = "Keep the captured tensors alive and write new data into them with .copy_()."
    why = """A graph reads fixed device addresses. When the captured tensor is rebound or freed, the
    replay reads the old memory, which the allocator may have given to another tensor."""


class RuntimeDivergence(Rule):
    code = "CG690"
    name = "replay-diverges"
    category = "frozen-scalar"
    severity = "warning"
    scope = RUNTIME
    summary = "Replaying the graph on fresh inputs gave other results than running eagerly."
    message = "replay differs from eager execution: {what}"
    fix_hint = "Look for host values baked into the capture (Python numbers, host RNG, attributes set during capture)."
    why = """Everything the CPU computed during capture is frozen into the graph: Python scalars,
    host random numbers, values read from host state. A replay on new inputs then computes with
    the values of the capture run."""


class RuntimeDynamicShape(Rule):
    code = "CG790"
    name = "input-dependent-shapes"
    category = "dynamic-shape"
    severity = "error"
    scope = RUNTIME
    summary = "Two inputs of the same shape produced intermediate tensors of different shapes."
    message = "tensor shapes depend on the input data: {what}"
    fix_hint = "Use fixed-size formulations (padding, nonzero_static, masks) so every replay has the same shapes."
    why = """A graph has fixed shapes. An operator whose output size depends on the values of its
    input cannot be replayed correctly for another input."""


class RuntimeNoGain(Rule):
    code = "CG990"
    name = "graph-not-worth-it"
    category = "memory"
    severity = "info"
    scope = RUNTIME
    summary = "Replaying the graph is not faster than running eagerly."
    message = "graph does not pay for itself: {what}"
    fix_hint = "Run this code eagerly, or capture a larger region so launch overhead dominates."
    why = """A graph saves CPU launch overhead but costs a private memory pool and the copies into its
    static inputs. For large kernels or few launches the replay can be as slow as eager execution
    while holding the pool's memory."""


class RuntimeCaptureError(Rule):
    code = "CG991"
    name = "capture-failed"
    category = "setup"
    severity = "error"
    scope = RUNTIME
    summary = "Capturing failed with an error no more specific rule explains."
    message = "capture failed: {what}"
    fix_hint = "Read the CUDA error in the message; the line is where the capture broke."
    why = """The capture raised an error (a CUDA stream-capture error or a PyTorch capture check) at a
    line no other rule covers. The graph was not created."""
