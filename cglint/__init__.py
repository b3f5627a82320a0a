"""cglint: find CUDA-Graph hazards in PyTorch code."""
from __future__ import annotations

__version__ = "0.1.0"


def __getattr__(name: str):
    # The verifier needs torch; load it only when asked for, so the checker never imports torch.
    if name == "verify":
        from cglint.verify.api import verify

        return verify
    raise AttributeError(f"module 'cglint' has no attribute {name!r}")
