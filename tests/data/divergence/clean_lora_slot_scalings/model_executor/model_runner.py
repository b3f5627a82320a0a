from typing import List

import torch

from ..lora.lora_config import LoRAAdapter
from ..lora.lora_manager import LoRAManager
from .cuda_graph_runner import CudaGraphRunner
from .forward_batch_info import ForwardBatch
from .model import TinyLoRAModel


class ModelRunner:
    def __init__(self, vocab_size=64, hidden_size=32, max_loras_per_batch=2, max_lora_rank=8, disable_cuda_graph=False):
        torch.manual_seed(0)
        self.lora_manager = LoRAManager(max_loras_per_batch, max_lora_rank, hidden_size, hidden_size)
        self.model = TinyLoRAModel(vocab_size, hidden_size, self.lora_manager).cuda().eval()
        self.cuda_graph_runner = None if disable_cuda_graph else CudaGraphRunner(self.model)

    def load_lora_adapters(self, adapters: List[LoRAAdapter]):
        for adapter in adapters:
            self.lora_manager.load_lora_adapter(adapter)

    @torch.inference_mode()
    def forward(self, forward_batch: ForwardBatch) -> torch.Tensor:
        forward_batch.weight_indices = self.lora_manager.prepare_lora_batch(forward_batch.lora_uids)
        if self.cuda_graph_runner is not None and self.cuda_graph_runner.can_run(forward_batch):
            return self.cuda_graph_runner.replay(forward_batch).clone()
        self.model.set_lora_info(forward_batch.weight_indices)
        return self.model(forward_batch.input_ids)
