from typing import Dict

import torch

from .forward_batch_info import ForwardBatch
from .model import TinyLoRAModel


class CudaGraphRunner:
    """Captures the model forward for a set of batch sizes and replays it."""

    def __init__(self, model: TinyLoRAModel, capture_bs=(4,), seq_len: int = 8):
        self.model = model
        self.capture_bs = capture_bs
        self.graphs: Dict[int, torch.cuda.CUDAGraph] = {}
        self.output_buffers: Dict[int, torch.Tensor] = {}
        max_bs = max(capture_bs)
        self.input_ids = torch.zeros(max_bs, seq_len, dtype=torch.long, device="cuda")
        self.weight_indices = torch.full((max_bs,), -1, dtype=torch.long, device="cuda")
        self.graph_memory_pool = None
        self.capture()

    def can_run(self, forward_batch: ForwardBatch) -> bool:
        return forward_batch.batch_size in self.graphs

    @torch.inference_mode()
    def capture(self):
        for bs in reversed(self.capture_bs):
            graph, out = self.capture_one_batch_size(bs)
            self.graphs[bs] = graph
            self.output_buffers[bs] = out

    def capture_one_batch_size(self, bs: int):
        input_ids = self.input_ids[:bs]
        self.model.set_lora_info(self.weight_indices[:bs])

        def run_once():
            return self.model(input_ids)

        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for _ in range(2):
                run_once()
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self.graph_memory_pool):
            out = run_once()
        self.graph_memory_pool = graph.pool()
        return graph, out

    def replay(self, forward_batch: ForwardBatch) -> torch.Tensor:
        bs = forward_batch.batch_size
        self.input_ids[:bs].copy_(forward_batch.input_ids)
        self.weight_indices[:bs].copy_(forward_batch.weight_indices)
        self.model.set_lora_info(self.weight_indices[:bs])
        self.graphs[bs].replay()
        return self.output_buffers[bs]
