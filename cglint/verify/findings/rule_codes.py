"""The codes of the rules the verifier reports, looked up by rule name in the catalogue.

Modules of the verifier name rules through these constants, not through literal codes: a
misspelt name fails here, when the verifier is imported, instead of yielding findings
under a code no rule defines. A rule the verifier reports only through its symbol tables
(rules/vocabulary.toml, checked against the catalogue when it loads) has no constant here.
"""
from __future__ import annotations

from cglint.catalogue import index

_CODE_OF_NAME = {name: code for code, (name, _category, _severity) in index().items()}


def code_of(name: str) -> str:
    try:
        return _CODE_OF_NAME[name]
    except KeyError:
        raise LookupError(f"no rule named {name!r} in the rule catalogue (rules/index.toml)") from None


# sync
TENSOR_TO_SCALAR = code_of("tensor-to-scalar")
DEVICE_TO_HOST_COPY = code_of("device-to-host-copy")
EXPLICIT_SYNCHRONIZE = code_of("explicit-synchronize")
DATA_DEPENDENT_OUTPUT_SIZE = code_of("data-dependent-output-size")
BOOLEAN_MASK_INDEX = code_of("boolean-mask-index")
REPEAT_INTERLEAVE_WITHOUT_OUTPUT_SIZE = code_of("repeat-interleave-without-output-size")
PIN_MEMORY = code_of("pin-memory")
RUNTIME_SYNC = code_of("runtime-sync")
# control-flow
TENSOR_DEPENDENT_BRANCH = code_of("tensor-dependent-branch")
INPUT_DEPENDENT_OPS = code_of("input-dependent-ops")
# cpu-rng
PYTHON_RANDOM = code_of("python-random")
NUMPY_RANDOM = code_of("numpy-random")
CUSTOM_GENERATOR = code_of("custom-generator")
# realloc
REBIND_CAPTURED_TENSOR = code_of("rebind-captured-tensor")
HOST_TO_DEVICE_IN_CAPTURE = code_of("host-to-device-in-capture")
RESIZE_IN_CAPTURE = code_of("resize-in-capture")
DELETE_CAPTURED_TENSOR = code_of("delete-captured-tensor")
CAPTURED_TENSOR_GONE = code_of("captured-tensor-gone")
# host-effect
PRINT_IN_CAPTURE = code_of("print-in-capture")
LOGGING_IN_CAPTURE = code_of("logging-in-capture")
FILE_IO_IN_CAPTURE = code_of("file-io-in-capture")
HOST_COUNTER_IN_CAPTURE = code_of("host-counter-in-capture")
# frozen-scalar, dynamic-shape, memory, setup
REPLAY_DIVERGES = code_of("replay-diverges")
INPUT_DEPENDENT_SHAPES = code_of("input-dependent-shapes")
GRAPH_NOT_WORTH_IT = code_of("graph-not-worth-it")
CAPTURE_LOOP_OUTPUT_REBOUND = code_of("capture-loop-output-rebound")
CAPTURE_FAILED = code_of("capture-failed")
OPTIMIZER_NOT_CAPTURABLE = code_of("optimizer-not-capturable")
