"""Attributes the verifier sets on torch's classes and modules for a while, put back exactly."""
from __future__ import annotations

from typing import Any

_INHERITED = object()


class Patched:
    """What `set` replaced, for `restore` to put back in reverse order: a name the owner only
    inherited (`torch.Tensor.item` comes from TensorBase) is deleted again, not left behind as
    a copy that would hide a later change of the base class."""

    def __init__(self) -> None:
        self._saved: list[tuple[Any, str, Any]] = []

    def set(self, owner: Any, name: str, value: Any) -> None:
        self._saved.append((owner, name, vars(owner).get(name, _INHERITED)))
        setattr(owner, name, value)

    def restore(self) -> None:
        while self._saved:
            owner, name, original = self._saved.pop()
            if original is _INHERITED:
                delattr(owner, name)
            else:
                setattr(owner, name, original)

    def __bool__(self) -> bool:
        return bool(self._saved)
