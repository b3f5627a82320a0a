# Copyright (c) 2022-2026, NVIDIA CORPORATION & AFFILIATES. All rights reserved.
#
# See LICENSE for license information.
# Excerpt of transformer-engine 2.20.2 (transformer_engine/pytorch), reduced.
import warnings

import torch

_compile_disabled_warned = False
_nvtx_range_messages = []


def warn_if_compile_disabled() -> None:
    """Warn once, at the first compile attempt, that the path is off."""
    global _compile_disabled_warned  # pylint: disable=global-statement
    if _compile_disabled_warned:
        return
    _compile_disabled_warned = True
    warnings.warn("torch.compile custom-op path disabled")


def nvtx_range_push(msg: str) -> None:
    """Push NVTX range onto stack, if NVTX range profiling is enabled."""
    _nvtx_range_messages.append(msg)
    torch.cuda.nvtx.range_push(msg)


def nvtx_range_pop(msg=None) -> None:
    """Pop NVTX range from stack, if NVTX range profiling is enabled."""
    if not _nvtx_range_messages:
        raise RuntimeError("Attempted to pop NVTX range from empty stack")
    last_msg = _nvtx_range_messages.pop()
    if msg is not None and msg != last_msg:
        raise ValueError(f"Attempted to pop NVTX range from stack with msg={msg}, but last range has msg={last_msg}")
    torch.cuda.nvtx.range_pop()
