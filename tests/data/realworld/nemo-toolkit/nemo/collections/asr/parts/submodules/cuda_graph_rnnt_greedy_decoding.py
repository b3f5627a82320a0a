# Copyright (c) 2025, NVIDIA CORPORATION.  All rights reserved.
#
# Licensed under the Apache License, Version 2.0 (the "License");
# you may not use this file except in compliance with the License.
# You may obtain a copy of the License at
#
#     http://www.apache.org/licenses/LICENSE-2.0
#
# Unless required by applicable law or agreed to in writing, software
# distributed under the License is distributed on an "AS IS" BASIS,
# WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
# See the License for the specific language governing permissions and
# limitations under the License.
# Excerpt of nemo-toolkit 3.0.0, reduced.
import numpy as np
import torch

from nemo.core.utils.cuda_python_utils import with_conditional_node


class RNNTGreedyDecodeCudaGraph:
    """Greedy RNN-T decoding whose whole loop is one CUDA graph with a conditional while node."""

    def __init__(self, max_symbols: int, caller):
        self.max_symbols = max_symbols
        self.caller = caller
        self.graph = None

    def _reinitialize(self, max_time, batch_size, encoder_output, while_loop_kernel, while_loop_conditional_handle):
        self.batch_size = batch_size
        self.max_time = max_time
        self.encoder_output = encoder_output
        self.graph = torch.cuda.CUDAGraph()

        # Always create a new stream, because the per-thread default stream disallows stream capture to a graph.
        stream_for_graph = torch.cuda.Stream(encoder_output.device)
        with (
            torch.cuda.stream(stream_for_graph),
            torch.inference_mode(),
            torch.cuda.graph(self.graph, stream=stream_for_graph, capture_error_mode="thread_local"),
        ):
            self.f = torch.zeros((self.batch_size, 1, encoder_output.shape[-1]), dtype=encoder_output.dtype, device=encoder_output.device)
            hidden = self.caller.decoder.initialize_state(self.f)
            self.last_label = torch.full(
                [self.batch_size], fill_value=self.caller._SOS, dtype=torch.long, device=encoder_output.device
            )
            not_blank_ptr = np.array([0], dtype=np.uint64)
            while_loop_args = np.array([while_loop_conditional_handle.getPtr(), not_blank_ptr.ctypes.data], dtype=np.uint64)
            with with_conditional_node(
                while_loop_kernel, while_loop_args, while_loop_conditional_handle, encoder_output.device
            ):
                g, hidden_prime = self.caller._pred_step(
                    self.last_label.unsqueeze(1), hidden, batch_size=self.batch_size
                )
                logp = self.caller._joint_step(self.f, g, log_normalize=None)[:, 0, 0, :]
                v, k = logp.max(1)
                self.last_label.copy_(k)

    def __call__(self, x):
        self.encoder_output[: x.shape[0]].copy_(x)
        self.graph.replay()
        return self.last_label.clone()
