# Copyright (c) OpenMMLab. All rights reserved.
# Excerpt of lmdeploy 0.18.0 (Apache-2.0), reduced.
import torch


class PiecewiseGraphTracer:
    """Records a model's eager steps and graph pieces between them."""

    def __init__(self, graph_pool):
        self._graph_pool = graph_pool
        self._active_graph: torch.cuda.CUDAGraph | None = None
        self._steps = []

    def _begin_piece(self) -> None:
        if self._active_graph is not None:
            raise RuntimeError('a graph piece is already being captured')
        graph = torch.cuda.CUDAGraph()
        graph.capture_begin(pool=self._graph_pool, capture_error_mode='thread_local')
        self._active_graph = graph

    def _finish_piece_and_replay(self) -> None:
        graph = self._active_graph
        if graph is None:
            raise RuntimeError('no graph piece is being captured')
        graph.capture_end()
        self._active_graph = None
        self._steps.append(graph)
        graph.replay()
