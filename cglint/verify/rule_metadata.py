"""Rule metadata for runtime findings: category, severity and fix hint of each code.

The catalogue (rules/) is the authority; the table below only covers the static codes
the verifier emits, so that runtime findings stay complete if a rule is missing there.
"""
from __future__ import annotations

import importlib.util
from functools import lru_cache
from pathlib import Path
from typing import Any, NamedTuple


class Meta(NamedTuple):
    category: str
    severity: str
    fix_hint: str


_FALLBACK: dict[str, Meta] = {
    "CG101": Meta("sync", "error", "Keep the value on the device (use tensor ops, torch.where) or read it outside the captured region."),
    "CG102": Meta("sync", "error", "Move the device-to-host copy out of the captured region, or copy into a pinned buffer with non_blocking=True."),
    "CG103": Meta("sync", "error", "Do not print or format tensors inside the captured region; print after replay."),
    "CG104": Meta("sync", "error", "Remove the synchronize/query from the captured region; synchronize before capture or after replay."),
    "CG105": Meta("sync", "error", "Use a fixed-size alternative (torch.nonzero_static, torch.where with three arguments, masking by multiplication)."),
    "CG106": Meta("sync", "error", "Replace boolean-mask indexing with torch.where(mask, x, fill) or masked_fill."),
    "CG107": Meta("sync", "error", "Compute unique values outside the captured region, or use a fixed-size formulation."),
    "CG108": Meta("sync", "error", "Pass output_size= to repeat_interleave so no host read is needed."),
    "CG109": Meta("sync", "error", "Pin host buffers once before capture, not inside the captured region."),
    "CG110": Meta("sync", "error", "Keep GradScaler.step/update outside the captured region."),
    "CG111": Meta("sync", "error", "Call clip_grad_norm_ with error_if_nonfinite=False inside captured code."),
    "CG201": Meta("control-flow", "error", "Replace the Python branch on tensor data with torch.where or arithmetic masking."),
    "CG202": Meta("control-flow", "warning", "Make the branch independent of host state that changes between replays, or capture one graph per branch."),
    "CG301": Meta("cpu-rng", "warning", "Draw random numbers with torch on the device (torch.rand(..., device='cuda'))."),
    "CG302": Meta("cpu-rng", "warning", "Draw random numbers with torch on the device instead of numpy.random."),
    "CG303": Meta("cpu-rng", "warning", "Create random tensors directly on the device instead of on the CPU."),
    "CG304": Meta("cpu-rng", "warning", "Use the default CUDA generator, or register the generator with the graph (register_generator_state)."),
    "CG305": Meta("cpu-rng", "warning", "Create generators before capture."),
    "CG306": Meta("cpu-rng", "error", "Seed and read or set RNG state outside the captured region."),
    "CG401": Meta("realloc", "warning", "Copy new data into the captured tensor with .copy_() instead of rebinding the name."),
    "CG402": Meta("realloc", "error", "Create host data on the device before capture and copy into it, or use device factories."),
    "CG403": Meta("realloc", "warning", "Allocate tensors at their final size before capture; do not resize_ captured tensors."),
    "CG404": Meta("realloc", "warning", "Keep every tensor the graph reads alive for as long as the graph is replayed."),
    "CG501": Meta("host-effect", "warning", "Print after replay(), from the graph's output tensors."),
    "CG502": Meta("host-effect", "warning", "Log after replay(), outside the captured code."),
    "CG503": Meta("host-effect", "warning", "Read and write files outside the captured code."),
    "CG504": Meta("host-effect", "warning", "Keep results in device tensors written in place; collect them after replay()."),
    "CG506": Meta("host-effect", "warning", "Time replays from outside the captured code (CUDA events around replay())."),
}


@lru_cache(maxsize=None)
def _catalogue() -> dict[str, Meta]:
    try:
        from cglint.catalogue import by_code

        rules = by_code()
    except Exception:  # a broken or partial catalogue must not stop a verification
        return {}
    return {code: Meta(rule.category, rule.severity, rule.fix_hint) for code, rule in rules.items()}


def meta(code: str) -> Meta:
    found = _catalogue().get(code) or _FALLBACK.get(code) or _runtime().get(code)
    if found is None:
        raise KeyError(f"no rule {code}")
    return found


@lru_cache(maxsize=None)
def _runtime_rules() -> dict[str, Any]:
    try:
        from cglint.rules import runtime
    except ModuleNotFoundError:
        # A source checkout run without installing: cglint.rules is the top-level rules/ folder.
        path = Path(__file__).resolve().parents[2] / "rules" / "runtime.py"
        spec = importlib.util.spec_from_file_location("cglint_rules_runtime", path)
        runtime = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(runtime)
    return {r.code: r for r in runtime.RULES}


def _runtime() -> dict[str, Meta]:
    return {code: Meta(r.category, r.severity, r.fix_hint) for code, r in _runtime_rules().items()}


def runtime_rule(code: str) -> Any:
    return _runtime_rules()[code]
