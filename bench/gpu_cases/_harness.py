"""Helpers shared by the GPU evidence cases (torch only).

A case defines `hazard()`. An error rule's case performs the capture its rule says
fails; a warning rule's case captures, replays and returns how far the replay is
from eager execution (a float, or a dict with "divergence" and a "control" measured
without the hazard). `PHASE` tells in which step an exception happened.
"""
# cglint: skip-file
import contextlib
import copy
import io
import os
import tempfile
import time

import torch

DEV = "cuda"
PHASE = "setup"


def phase(name):
    global PHASE
    PHASE = name


def side_warmup(fn, iters=3):
    """Run `fn` a few times on a side stream, as PyTorch's documentation asks before capture."""
    phase("warmup")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(iters):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()


def capture(fn, warmup=True, **kwargs):
    """Warm up (unless told not to), capture one call of `fn`, return (graph, its output)."""
    if warmup:
        side_warmup(fn)
    phase("capture")
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, **kwargs):
        out = fn()
    torch.cuda.synchronize()
    phase("replay")
    return graph, out


def replay(graph, times=1):
    phase("replay")
    for _ in range(times):
        graph.replay()
    torch.cuda.synchronize()


def maxdiff(a, b):
    return float((a.detach().float() - b.detach().float()).abs().max())


__all__ = ["DEV", "capture", "contextlib", "copy", "io", "maxdiff", "os", "phase", "replay", "side_warmup", "tempfile", "time", "torch"]
