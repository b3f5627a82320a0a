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
import functools
import logging
import os

logger = logging.getLogger(__name__)


def cache_once(fn):
    """
    NOTE: `functools.lru_cache` is not compatible with `torch.compile`
    So we manually implement a simple cache_once decorator to replace it.
    """
    result_map = {}

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        key = (args, tuple(sorted(kwargs.items())))
        if key not in result_map:
            result_map[key] = fn(*args, **kwargs)
        return result_map[key]

    return wrapper  # type: ignore


_digest_cache = {}


def _file_digest(path):
    digest = _digest_cache.get(path)
    if digest is None:
        with open(path, "rb") as f:
            digest = hash(f.read())
        _digest_cache[path] = digest
    return digest


def load_jit(name, *args, cuda_files=()):
    """Build (or find) and load a JIT kernel module."""
    key = (name, args, tuple(_file_digest(f) for f in cuda_files))
    if not os.path.exists(f"/tmp/{hash(key)}.so"):
        logger.warning("building JIT module %s", name)
    return __import__("importlib").import_module(name)


@cache_once
def rmsnorm_module(dtype):
    return load_jit("rmsnorm", str(dtype), cuda_files=["elementwise/rmsnorm.cuh"])
