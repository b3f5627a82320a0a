# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
# Excerpt of vllm 0.33.0, reduced.
import threading

import torch

_current_stream_tls = threading.local()


def current_stream() -> torch.cuda.Stream:
    """Replace `torch.cuda.current_stream()` with `vllm.utils.current_stream()`."""
    if not hasattr(_current_stream_tls, "value") or _current_stream_tls.value is None:
        # On CUDA, we capture and replay cudagraph on the same stream,
        # so we need to avoid using the default stream as well.
        # Therefore, we create a dedicated stream per process.
        new_stream = torch.cuda.Stream()
        new_stream.wait_stream(torch.cuda.current_stream())
        # torch.cuda.set_stream here is the alias of _pathed_set_stream
        torch.cuda.set_stream(new_stream)
        _current_stream_tls.value = new_stream
    return _current_stream_tls.value
