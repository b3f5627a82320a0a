"""Replay against eager: how far apart the outputs are."""
from __future__ import annotations

from typing import Any

import torch

from cglint.verify.inputs import tensors


def max_errors(expected: Any, got: Any) -> dict[str, float]:
    """Max absolute error per output tensor (inf for shape or dtype mismatches)."""
    errors = {}
    got_by_name = dict(tensors(got))
    for name, want in tensors(expected):
        have = got_by_name.get(name)
        if have is None or have.shape != want.shape:
            errors[name] = float("inf")
            continue
        a, b = want.detach().double(), have.detach().double()
        diff = (a - b).abs()
        both_nan = torch.isnan(a) & torch.isnan(b)
        diff = torch.where(both_nan, torch.zeros_like(diff), diff)
        errors[name] = float(diff.max().item()) if diff.numel() else 0.0
    return errors


def diverges(expected: Any, got: Any, *, rtol: float, atol: float) -> dict[str, float]:
    """The outputs whose replay values are not allclose to eager, with their max error."""
    got_by_name = dict(tensors(got))
    bad = {}
    for name, err in max_errors(expected, got).items():
        want = dict(tensors(expected))[name]
        have = got_by_name.get(name)
        close = have is not None and have.shape == want.shape and torch.allclose(
            have.detach().double(), want.detach().double(), rtol=rtol, atol=atol, equal_nan=True)
        if not close:
            bad[name] = err
    return bad
