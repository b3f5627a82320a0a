# Copyright (c) 2023, NVIDIA CORPORATION. All rights reserved.
# Excerpt of megatron-core 0.16.1, reduced.
from importlib.metadata import version

import torch
from packaging.version import Version as PkgVersion

_te_version = None
_nvtx_enabled = False
_nvtx_range_messages = []


def get_te_version():
    """Get TE version from __version__; if not available use pip's. Use caching."""
    try:
        import transformer_engine as te

        HAVE_TE = True
    except ImportError:
        HAVE_TE = False

    def get_te_version_str():
        import transformer_engine as te

        if hasattr(te, "__version__"):
            return str(te.__version__)
        else:
            return version("transformer-engine")

    global _te_version
    if _te_version is None and HAVE_TE:
        _te_version = PkgVersion(get_te_version_str())
    return _te_version


def is_te_min_version(version, check_equality=True):
    """Check if minimum version of `transformer-engine` is installed."""
    if check_equality:
        return get_te_version() >= PkgVersion(version)
    return get_te_version() > PkgVersion(version)


def configure_nvtx_profiling(enabled: bool) -> None:
    """Configure NVTX range profiling to be enabled or disabled."""
    global _nvtx_enabled
    _nvtx_enabled = enabled


def nvtx_range_push(msg=None, suffix=None) -> None:
    """Push NVTX range onto stack."""
    if not _nvtx_enabled:
        return
    if suffix is not None:
        msg = f"{msg}.{suffix}"
    torch.cuda.nvtx.range_push(msg)
