"""The runtime verifier: trial captures under instrumentation (needs torch; GPU optional).

Nothing here imports torch until it is used. `cglint verify SCRIPT` runs a script
(run/cli.py); the Python API is `cglint.verify_function(fn, sample_args, ...)` (api.py).

`cglint.verify(fn, sample_args, ...)` is the name shared/DESIGN.md gives that API, which
other tools call. Python binds `cglint.verify` to this package as soon as any of its
modules is imported, so the package answers the call itself, with verify_function.
"""
from __future__ import annotations

import sys
import types
from typing import Any


class _CallablePackage(types.ModuleType):
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        from cglint.verify.api import verify_function

        return verify_function(*args, **kwargs)


sys.modules[__name__].__class__ = _CallablePackage
