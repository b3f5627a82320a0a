"""cglint: find CUDA-Graph hazards in PyTorch code."""
from __future__ import annotations

import os as _os

__version__ = "0.1.0"

# Installed, the rule catalogue ships as cglint.rules; in a plain source checkout it is the
# rules/ folder beside this package, which this makes importable under the same name.
_here = _os.path.dirname(__file__)
if not _os.path.isdir(_os.path.join(_here, "rules")) and _os.path.isfile(_os.path.join(_here, "..", "rules", "__init__.py")):
    __path__.append(_os.path.dirname(_here))


def __getattr__(name: str):
    # The verifier needs torch; load it only when asked for, so the checker never imports torch.
    if name == "verify":
        from cglint.verify.api import verify

        return verify
    raise AttributeError(f"module 'cglint' has no attribute {name!r}")
