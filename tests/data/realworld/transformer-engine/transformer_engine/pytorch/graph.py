# Copyright (c) 2022-2026, NVIDIA CORPORATION & AFFILIATES. All rights reserved.
#
# See LICENSE for license information.
# Excerpt of transformer-engine 2.20.2 (transformer_engine/pytorch), reduced.
import gc
from contextlib import contextmanager

import torch


@contextmanager
def _graph_context_wrapper(*args, **kwargs):
    """Wrapper around `torch.cuda.graph` that keeps the garbage collector off while capturing."""
    gc_is_enabled = gc.isenabled()
    if gc_is_enabled:
        gc.disable()
    with torch.cuda.graph(*args, **kwargs):
        yield
    if gc_is_enabled:
        gc.enable()


def _make_graphed_callables(callables, sample_args, _order, _num_layers_per_chunk, _prefix_num_layers, num_microbatches, pool=None):
    """Capture the forward graph of every layer of every model chunk, in pipeline order."""
    fwd_graphs = [torch.cuda.CUDAGraph() for _ in range(len(sample_args))]
    mempool = torch.cuda.graph_pool_handle() if pool is None else pool
    per_callable_static_outputs = [None] * len(sample_args)
    fwd_idx = [0] * len(_num_layers_per_chunk)
    for c_id in _order:
        if c_id > 0:
            # Capture forward graph for model chunk c_id, microbatch fwd_idx[c_id-1]
            m_chunk = c_id - 1
            for l_no in range(_num_layers_per_chunk[m_chunk]):
                func = callables[_prefix_num_layers[m_chunk] + l_no]
                per_callable_fwd_idx = (_prefix_num_layers[m_chunk] * num_microbatches) + (
                    fwd_idx[m_chunk] * _num_layers_per_chunk[m_chunk] + l_no
                )
                args = sample_args[per_callable_fwd_idx]
                fwd_graph = fwd_graphs[per_callable_fwd_idx]
                with _graph_context_wrapper(fwd_graph, pool=mempool):
                    outputs = func(*args)
                per_callable_static_outputs[per_callable_fwd_idx] = outputs
            fwd_idx[m_chunk] += 1
    return fwd_graphs, per_callable_static_outputs
