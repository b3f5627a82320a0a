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
import os
import sys

_RECORDED_NS_READS = set()
_RECORD_DUMP_REGISTERED = False
_ROLE_NS_MODE = os.environ.get("SGLANG_ROLE_NAMESPACES", "off")


def _ensure_record_dump_registered() -> None:
    global _RECORD_DUMP_REGISTERED
    if not _RECORD_DUMP_REGISTERED:
        _RECORD_DUMP_REGISTERED = True
        import atexit

        atexit.register(_dump_recorded_namespace_reads)


def _record_namespace_read(role, name: str) -> None:
    if (role, name) in _RECORDED_NS_READS:
        return
    _RECORDED_NS_READS.add((role, name))
    _ensure_record_dump_registered()


def _dump_recorded_namespace_reads() -> None:
    """Emit the record-mode audit: one line per role with the namespaces its process read."""
    for role, name in sorted(_RECORDED_NS_READS, key=str):
        print(f"[role-namespaces] pid={os.getpid()} role={role} read={name}", file=sys.stderr, flush=True)


def get_exec(role=None):
    if _ROLE_NS_MODE == "record":
        _record_namespace_read(role, "exec")
    return _EXEC


class _Exec:
    eps_override = None


_EXEC = _Exec()
