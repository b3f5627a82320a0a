# Copyright (c) 2023, NVIDIA CORPORATION. All rights reserved.
# Excerpt of megatron-core 0.16.1, reduced.
import torch

from megatron.core import tensor_parallel


class TransformerLayer(torch.nn.Module):
    """A single transformer layer."""

    def __init__(self, config, pre_mlp_layernorm, mlp, cuda_graph):
        super().__init__()
        self.config = config
        self.pre_mlp_layernorm = pre_mlp_layernorm
        self.mlp = mlp
        self.cuda_graph = cuda_graph
        self.recompute_pre_mlp_layernorm = False
        if config.recompute_granularity == "selective" and "mlp_norm" in config.recompute_modules:
            self.recompute_pre_mlp_layernorm = True

    def forward(self, hidden_states):
        """Perform a forward pass through the transformer layer."""
        return self._forward_mlp(hidden_states)

    def _forward_pre_mlp_layernorm(self, hidden_states):
        if self.recompute_pre_mlp_layernorm:
            self.pre_mlp_norm_checkpoint = tensor_parallel.CheckpointWithoutOutput()
            pre_mlp_layernorm_output = self.pre_mlp_norm_checkpoint.checkpoint(
                self.pre_mlp_layernorm, hidden_states
            )
        else:
            pre_mlp_layernorm_output = self.pre_mlp_layernorm(hidden_states)
        return pre_mlp_layernorm_output

    def _forward_mlp(self, hidden_states):
        residual = hidden_states
        pre_mlp_layernorm_output = self._forward_pre_mlp_layernorm(hidden_states)
        mlp_output_with_bias = self.mlp(pre_mlp_layernorm_output)
        return self._forward_post_mlp(mlp_output_with_bias, residual)

    def _forward_post_mlp(self, mlp_output_with_bias, residual):
        if self.recompute_pre_mlp_layernorm:
            # discard the output of the pre-mlp layernorm and register the recompute
            # as a gradient hook of mlp_output_with_bias[0]
            self.pre_mlp_norm_checkpoint.discard_output_and_register_recompute(
                mlp_output_with_bias
            )
        return mlp_output_with_bias + residual

    def _te_cuda_graph_replay(self, hidden_states):
        """Replay the attention part's graph, then run the MLP eagerly."""
        residual = self.cuda_graph(hidden_states)
        mlp_output_with_bias = self.mlp(residual)
        # If we early returned, layernorm recompute hooks were attached to the output buffer
        # of the cudagraph, so disable the recompute hooks inside _forward_post_mlp
        recompute_pre_mlp_layernorm = self.recompute_pre_mlp_layernorm
        self.recompute_pre_mlp_layernorm = False
        output = self._forward_post_mlp(mlp_output_with_bias, residual)
        self.recompute_pre_mlp_layernorm = recompute_pre_mlp_layernorm
        return output
