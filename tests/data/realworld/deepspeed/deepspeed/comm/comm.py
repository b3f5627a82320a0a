# Copyright (c) Microsoft Corporation.
# SPDX-License-Identifier: Apache-2.0

# DeepSpeed Team
# Excerpt of deepspeed 0.19.8, reduced.
import torch

cdb = None
nccl_backend = None


def set_backend():
    global cdb
    if nccl_backend is not None and nccl_backend.is_initialized():
        cdb = nccl_backend


def init_distributed(dist_backend="nccl"):
    """Initialize dist backend, potentially performing MPI discovery if needed."""
    global nccl_backend
    torch.distributed.init_process_group(dist_backend)
    nccl_backend = torch.distributed
    set_backend()


def is_initialized() -> bool:
    #assert cdb is not None, 'DeepSpeed backend not set, please initialize it using init_process_group()'
    if cdb is None:
        return False
    else:
        return cdb.is_initialized()


def get_rank(group=None):
    return cdb.get_rank(group)
