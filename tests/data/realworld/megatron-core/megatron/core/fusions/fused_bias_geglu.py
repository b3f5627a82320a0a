# Copyright (c) 2022, NVIDIA CORPORATION. All rights reserved.
# Excerpt of megatron-core 0.16.1, reduced.
import torch


class WeightedQuickGeGLUFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, input, weights, fp8_input_store, linear_offset):
        return input * weights + linear_offset


def weighted_bias_quick_geglu_impl(
    input, bias, weights, fp8_input_store=False, linear_offset=0.0, clamp_value=None
):
    """Token-wise-weighted bias quick_geglu fusion."""
    ori_shape = input.shape
    assert len(ori_shape) in [2, 3]
    input = input.view(-1, ori_shape[-1])
    linear_offset = torch.tensor(linear_offset, dtype=input.dtype, device=input.device)
    output = WeightedQuickGeGLUFunction.apply(input, weights, fp8_input_store, linear_offset)
    return output if len(ori_shape) == 2 else output.view(ori_shape[0], ori_shape[1], -1)
