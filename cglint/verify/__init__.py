"""The runtime verifier: trial captures under instrumentation (needs torch; GPU optional).

Nothing here imports torch until it is used. `cglint.verify(fn, sample_args, ...)` works
whether `cglint.verify` resolves to this package or to the function: importing any
submodule binds the package to that name, so the package itself is callable.
"""
from __future__ import annotations

import sys
import types
from typing import Any


class _CallablePackage(types.ModuleType):
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        from cglint.verify.api import verify

        return verify(*args, **kwargs)


sys.modules[__name__].__class__ = _CallablePackage


def __getattr__(name: str) -> Any:
    if name in ("verify", "VerifyReport"):
        from cglint.verify import api, result

        return api.verify if name == "verify" else result.VerifyReport
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
