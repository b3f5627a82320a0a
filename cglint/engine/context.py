"""What a rule may ask the engine about the node it is looking at."""
from __future__ import annotations

from types import SimpleNamespace
from typing import TYPE_CHECKING, Optional

import libcst as cst

from cglint.engine.api import tables
from cglint.engine.project import ClassInfo
from cglint.engine.syntax import call_method
from cglint.engine.values import Kind, Value, evaluate, to_device

if TYPE_CHECKING:
    from cglint.engine.walk import Walker


class Context:
    def __init__(self, walker: "Walker"):
        self._walker = walker

    @property
    def api(self) -> SimpleNamespace:
        """The PyTorch symbol tables (rules/torch_api.toml)."""
        return tables()

    # --- values ------------------------------------------------------------
    def value(self, expr: cst.BaseExpression) -> Value:
        return evaluate(expr, self._walker.scope)

    def is_tensor(self, expr: cst.BaseExpression) -> bool:
        """Known to be a tensor (on any device)."""
        return self.value(expr).is_tensor

    def is_device_tensor(self, expr: cst.BaseExpression) -> bool:
        return self.value(expr).kind == Kind.TENSOR

    def is_host_tensor(self, expr: cst.BaseExpression) -> bool:
        return self.value(expr).kind == Kind.CPU_TENSOR

    def maybe_tensor(self, expr: cst.BaseExpression) -> bool:
        """A tensor or something the checker cannot tell (but not a known host value)."""
        return self.value(expr).kind in (Kind.TENSOR, Kind.CPU_TENSOR, Kind.UNKNOWN)

    def qualname(self, expr: cst.BaseExpression) -> Optional[str]:
        """`torch.cuda.synchronize` for `th.cuda.synchronize` after `import torch as th`."""
        return self._walker.scope.qualname(expr)

    def call_name(self, call: cst.Call) -> Optional[str]:
        return self.qualname(call.func)

    def method(self, call: cst.Call) -> Optional[tuple[cst.BaseExpression, str]]:
        """(receiver, name) when `call` is a method call on something that is not a module."""
        found = call_method(call)
        if found is None or self.qualname(call.func) is not None:
            return None
        return found

    def to_device(self, call: cst.Call) -> Optional[str]:
        """For `.to(...)`: 'cpu', 'device' or None (dtype only)."""
        return to_device(call, self._walker.scope)

    # --- state between replays ----------------------------------------------
    def changing_state(self, expr: cst.BaseExpression) -> Optional[str]:
        """Describe `expr` if it reads host state that the code changes between replays."""
        return self._walker.engine.state.changing(expr, self._walker.scope)

    @property
    def captured_names(self) -> set[str]:
        """Locals a capture in this function read or wrote (for replay rules)."""
        return self._walker.engine.captured_names(self._walker.function)

    def captured_attribute(self, target: cst.BaseExpression) -> Optional[str]:
        """`obj.attr` if it names an attribute that a capture of obj's class read or wrote."""
        if not isinstance(target, cst.Attribute):
            return None
        base = self.value(target.value)
        for cls in base.targets:
            if isinstance(cls, ClassInfo) and target.attr.value in self._walker.engine.captured_attrs(cls):
                return target.attr.value
        return None

    def replay_follows(self) -> bool:
        """Whether a replay() can run after the current statement in this function."""
        return self._walker.engine.replay_follows(self._walker.function, self._walker.statement)
