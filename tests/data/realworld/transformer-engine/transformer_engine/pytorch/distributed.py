# Copyright (c) 2022-2026, NVIDIA CORPORATION & AFFILIATES. All rights reserved.
#
# See LICENSE for license information.
# Excerpt of transformer-engine 2.20.2 (transformer_engine/pytorch), reduced.
import torch


def has_te_modules(network):
    """Check if there are any Transformer Engine modules in the network."""
    if isinstance(network, torch.nn.Module):
        return any(type(module).__module__.startswith("transformer_engine") for module in network.modules())

    # Cannot check for TE modules inside a custom class/callable that's not a torch.nn.Module,
    # so just assume that it has TE modules just to be safe.
    return True


class _CheckpointFrame:
    def cache_rng_states(self, forward=True):
        """Cache fwd/bwd RNG states in the frame to restore later."""
        rng_states = (torch.get_rng_state(),)
        if forward:
            self.fwd_rng_states = rng_states
        else:
            self.bwd_rng_states = rng_states


def checkpoint(function, *args, **kwargs):
    """Checkpoint a part of the model by trading compute for memory."""
    use_reentrant = kwargs.pop("use_reentrant", True)
    # Trigger the native PyTorch checkpoint if the function is not or does not contain a
    # Transformer Engine module.
    if not has_te_modules(function):
        return torch.utils.checkpoint.checkpoint(function, *args, use_reentrant=use_reentrant, **kwargs)
    new_frame = _CheckpointFrame()
    new_frame.cache_rng_states(forward=True)
    with torch.no_grad():
        return function(*args, **kwargs)
