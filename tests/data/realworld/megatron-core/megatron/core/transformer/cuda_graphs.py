# Copyright (c) 2025, NVIDIA CORPORATION. All rights reserved.
# Excerpt of megatron-core 0.16.1, reduced.
_IS_GRAPH_WARMUP = False


def is_graph_warmup():
    """Query if currently warming up for graph capture."""
    return _IS_GRAPH_WARMUP
