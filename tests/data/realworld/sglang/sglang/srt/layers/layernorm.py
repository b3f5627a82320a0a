# Copyright 2023-2026 SGLang Team
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
# ==============================================================================
# Excerpt of sglang 0.5.23, reduced.
from typing import Optional

import torch
from torch import nn

from sglang.kernels.jit.utils import rmsnorm_module
from sglang.srt.runtime_context import get_exec


class RMSNorm(nn.Module):
    def __init__(self, hidden_size: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.variance_epsilon = eps

    def forward_cuda(self, x: torch.Tensor, residual: Optional[torch.Tensor] = None) -> torch.Tensor:
        eps = get_exec().eps_override or self.variance_epsilon
        module = rmsnorm_module(x.dtype)
        if residual is not None:
            module.fused_add_rmsnorm(x, residual, self.weight.data, eps)
            return x, residual
        out = torch.empty_like(x)
        module.rmsnorm(out, x, self.weight.data, eps)
        return out
