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
import torch
from torch import nn

from .vae import AutoencoderMixin


class AutoencoderKL(nn.Module, AutoencoderMixin):
    r"""A VAE model with KL loss for encoding images into latents and decoding latent representations into images."""

    def __init__(self, latent_channels=4, out_channels=3, sample_size=512):
        super().__init__()
        self.post_quant_conv = nn.Conv2d(latent_channels, latent_channels, 1)
        self.decoder = nn.Conv2d(latent_channels, out_channels, 3, padding=1)
        self.use_slicing = False
        self.use_tiling = False
        self.tile_latent_min_size = sample_size // 8

    def tiled_decode(self, z: torch.Tensor) -> torch.Tensor:
        tiles = [self.decoder(tile) for tile in z.split(self.tile_latent_min_size, dim=-1)]
        return torch.cat(tiles, dim=-1)

    def _decode(self, z: torch.Tensor) -> torch.Tensor:
        if self.use_tiling and (z.shape[-1] > self.tile_latent_min_size or z.shape[-2] > self.tile_latent_min_size):
            return self.tiled_decode(z)

        if self.post_quant_conv is not None:
            z = self.post_quant_conv(z)

        return self.decoder(z)

    def decode(self, z: torch.FloatTensor, generator=None) -> torch.FloatTensor:
        """Decode a batch of images."""
        if self.use_slicing and z.shape[0] > 1:
            decoded_slices = [self._decode(z_slice) for z_slice in z.split(1)]
            decoded = torch.cat(decoded_slices)
        else:
            decoded = self._decode(z)
        return decoded
