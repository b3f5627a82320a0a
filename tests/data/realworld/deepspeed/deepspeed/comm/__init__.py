# Copyright (c) Microsoft Corporation.
# SPDX-License-Identifier: Apache-2.0

# DeepSpeed Team
# Excerpt of deepspeed 0.19.8, reduced.
from .comm import get_rank, is_initialized
