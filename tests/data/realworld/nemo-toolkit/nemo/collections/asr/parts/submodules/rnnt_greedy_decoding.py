# Copyright (c) 2020, NVIDIA CORPORATION.  All rights reserved.
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
from typing import Optional, Tuple, Union

import torch

from nemo.collections.common.parts.rnn import label_collate


class _GreedyRNNTInfer:
    """A greedy transducer decoder."""

    def __init__(self, decoder_model, joint_model, blank_index: int):
        self.decoder = decoder_model
        self.joint = joint_model
        self._blank_index = blank_index
        self._SOS = blank_index  # Start of single index

    def _pred_step(
        self,
        label: Union[torch.Tensor, int],
        hidden: Optional[torch.Tensor],
        add_sos: bool = False,
        batch_size: Optional[int] = None,
    ) -> Tuple[torch.Tensor, torch.Tensor]:
        """Common prediction step based on the AbstractRNNTDecoder implementation."""
        if isinstance(label, torch.Tensor):
            # label: [batch, 1]
            if label.dtype != torch.long:
                label = label.long()

        else:
            # Label is an integer
            if label == self._SOS:
                return self.decoder.predict(None, hidden, add_sos=add_sos, batch_size=batch_size)

            label = label_collate([[label]])

        # output: [B, 1, K]
        return self.decoder.predict(label, hidden, add_sos=add_sos, batch_size=batch_size)

    def _joint_step(self, enc, pred, log_normalize: Optional[bool] = None):
        """Common joint step based on AbstractRNNTJoint implementation."""
        logits = self.joint.joint(enc, pred)
        return logits.log_softmax(dim=-1) if log_normalize else logits


class GreedyBatchedRNNTInfer(_GreedyRNNTInfer):
    """A batch level greedy transducer decoder, optionally with the whole loop in a CUDA graph."""

    def __init__(self, decoder_model, joint_model, blank_index: int, max_symbols_per_step: int = 10):
        super().__init__(decoder_model, joint_model, blank_index)
        from nemo.collections.asr.parts.submodules.cuda_graph_rnnt_greedy_decoding import RNNTGreedyDecodeCudaGraph

        self._greedy_decode = RNNTGreedyDecodeCudaGraph(max_symbols_per_step, self)
