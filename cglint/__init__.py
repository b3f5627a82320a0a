"""cglint: find CUDA-Graph hazards in PyTorch code."""
from __future__ import annotations

import os as _os
from typing import TYPE_CHECKING

__version__ = "0.1.0"

# Installed, the rule catalogue ships as cglint.rules; in a plain source checkout it is the
# rules/ folder beside this package, which this makes importable under the same name.
_here = _os.path.dirname(__file__)
if not _os.path.isdir(_os.path.join(_here, "rules")) and _os.path.isfile(_os.path.join(_here, "..", "rules", "__init__.py")):
    __path__.append(_os.path.dirname(_here))


if TYPE_CHECKING:
    from cglint.verify.api import verify_function as verify_function


def __getattr__(name: str):
    # The verifier's API loads the rule catalogue (0.4 s) and, when called, torch: it is
    # imported when first asked for, so that `import cglint` stays instant for the checker.
    if name == "verify_function":
        from cglint.verify.api import verify_function

        return verify_function
    if name == "verify":  # shared/DESIGN.md's name for the API: the package, which is callable
        import cglint.verify

        return cglint.verify
    raise AttributeError(f"module 'cglint' has no attribute {name!r}")
