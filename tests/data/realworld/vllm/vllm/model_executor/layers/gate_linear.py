# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
# Excerpt of vllm 0.33.0, reduced.
import logging

import cutlass.cute as cute
import torch

from vllm.utils import current_stream

logger = logging.getLogger(__name__)


class LLBf16Gemm:
    """Low-latency bf16 router GEMM, compiled per shape on first use."""

    def __init__(self):
        self._compiled_cache = {}

    def _compile_dotprod(self, M: int, K: int, output_dtype: torch.dtype) -> None:
        compiled = cute.compile(self._kernel_for(M, K), options="--enable-tvm-ffi")
        self._compiled_cache[(M, K, output_dtype)] = compiled
        logger.debug("Compiled ll_bf16_dotprod: M=%d, K=%d", M, K)

    def _kernel_for(self, M: int, K: int):
        return lambda hidden_states, weight: hidden_states @ weight

    def compile(self, M: int, K: int, output_dtype: torch.dtype) -> None:
        if (M, K, output_dtype) not in self._compiled_cache:
            self._compile_dotprod(M, K, output_dtype)

    def __call__(self, hidden_states: torch.Tensor, router_weight: torch.Tensor, output_dtype=torch.float32):
        M, K = hidden_states.shape
        if (M, K, output_dtype) not in self._compiled_cache:
            self.compile(M, K, output_dtype)
        kernel = self._compiled_cache[(M, K, output_dtype)]
        with torch.cuda.stream(current_stream()):
            return kernel(hidden_states, router_weight.t()).to(output_dtype)


ll_bf16_gemm = LLBf16Gemm()


class GateLinear(torch.nn.Module):
    def __init__(self, hidden_size: int, num_experts: int):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.empty(num_experts, hidden_size, dtype=torch.bfloat16))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return ll_bf16_gemm(x, self.weight)
