# Copyright 2026 The HuggingFace Team. All rights reserved.
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
# Excerpt of diffusers 0.42.1, reduced.
from typing import Any

import torch
from torch import nn

from ..attention import BasicTransformerBlock
from ..embeddings import GLIGENTextBoundingboxProjection


class UNet2DConditionModel(nn.Module):
    """A conditional 2D UNet model (reduced to its time embedding, GLIGEN and one transformer block)."""

    def __init__(self, in_channels=4, block_out_channels=320, cross_attention_dim=768):
        super().__init__()
        self.conv_in = nn.Conv2d(in_channels, block_out_channels, kernel_size=3, padding=1)
        self.time_embedding = nn.Linear(1, block_out_channels)
        self.position_net = GLIGENTextBoundingboxProjection(cross_attention_dim, cross_attention_dim)
        self.transformer_blocks = nn.ModuleList([BasicTransformerBlock(block_out_channels)])
        self.conv_out = nn.Conv2d(block_out_channels, in_channels, kernel_size=3, padding=1)

    def enable_forward_chunking(self, chunk_size: int | None = None, dim: int = 0) -> None:
        """Sets the attention processor to use feed forward chunking."""
        for block in self.transformer_blocks:
            block.set_chunk_feed_forward(chunk_size=chunk_size, dim=dim)

    def get_time_embed(self, sample: torch.Tensor, timestep: torch.Tensor | float | int) -> torch.Tensor | None:
        timesteps = timestep
        if not torch.is_tensor(timesteps):
            # TODO: this requires sync between CPU and GPU. So try to pass timesteps as tensors if you can
            # This would be a good case for the `match` statement (Python 3.10+)
            dtype = torch.float64 if isinstance(timestep, float) else torch.int64
            timesteps = torch.tensor([timesteps], dtype=dtype, device=sample.device)
        elif len(timesteps.shape) == 0:
            timesteps = timesteps[None].to(sample.device)

        # broadcast to batch dimension in a way that's compatible with ONNX/Core ML
        timesteps = timesteps.expand(sample.shape[0])
        return self.time_embedding(timesteps[:, None].to(dtype=sample.dtype))

    def forward(
        self,
        sample: torch.Tensor,
        timestep: torch.Tensor | float | int,
        encoder_hidden_states: torch.Tensor,
        cross_attention_kwargs: dict[str, Any] | None = None,
    ) -> torch.Tensor:
        emb = self.get_time_embed(sample=sample, timestep=timestep)
        sample = self.conv_in(sample) + emb[:, :, None, None]

        # 2.5 GLIGEN position net
        if cross_attention_kwargs is not None and cross_attention_kwargs.get("gligen", None) is not None:
            cross_attention_kwargs = cross_attention_kwargs.copy()
            gligen_args = cross_attention_kwargs.pop("gligen")
            cross_attention_kwargs["gligen"] = {"objs": self.position_net(**gligen_args)}

        batch, channels, height, width = sample.shape
        hidden_states = sample.permute(0, 2, 3, 1).reshape(batch, height * width, channels)
        for block in self.transformer_blocks:
            hidden_states = block(hidden_states, cross_attention_kwargs=cross_attention_kwargs)
        sample = hidden_states.reshape(batch, height, width, channels).permute(0, 3, 1, 2)
        return self.conv_out(sample)
