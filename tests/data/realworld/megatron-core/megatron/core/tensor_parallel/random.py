# Copyright (c) 2022, NVIDIA CORPORATION. All rights reserved.
# Excerpt of megatron-core 0.16.1, reduced.
import torch

from megatron.core.transformer.cuda_graphs import is_graph_warmup


def _get_all_rng_states():
    """Get all the rng states."""
    cpu_rng_state = torch.get_rng_state()
    return cpu_rng_state


class CheckpointFunction(torch.autograd.Function):
    """Checkpoint Function"""

    @staticmethod
    def forward(ctx, run_function, distribute_saved_activations, *args):
        ctx.run_function = run_function
        with torch.no_grad():
            outputs = run_function(*args)
        ctx.save_for_backward(*args)
        return outputs


def checkpoint(function, distribute_saved_activations, *args):
    """Checkpoint a model or part of the model."""
    return CheckpointFunction.apply(function, distribute_saved_activations, *args)


class CheckpointWithoutOutput:
    """Checkpoint a model or part of the model and release the output."""

    def __init__(self):
        self.run_function = None
        self.outputs = None

    def checkpoint(self, run_function, *args):
        """Checkpoint function."""
        if is_graph_warmup():
            return run_function(*args)
        self.run_function = run_function
        self.rng_states = _get_all_rng_states()
        with torch.no_grad():
            outputs = run_function(*args)
        self.outputs = outputs
        if isinstance(self.outputs, torch.Tensor):
            self.outputs = (self.outputs,)
        return outputs

    def discard_output_and_register_recompute(self, hook_tensor):
        """Release the output tensor storages and register the recompute function."""
        if is_graph_warmup():
            return
        # use resize to release the output tensor memory and still keep the metadata in the tensors.
        for output in self.outputs:
            output.untyped_storage().resize_(0)
        hook_tensor.register_hook(lambda grad: grad)
