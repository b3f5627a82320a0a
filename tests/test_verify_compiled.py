"""What torch says about compiled functions, as findings (cglint/verify/compiled/regions.py), on the CPU:
torch's log messages (recorded from torch's own output) map to the compiled-mode rule whose claim
they are, at the user's line; the kept-outputs check finds who holds an overwritten output; and
`cglint verify` runs the compiled fixtures with Dynamo's eager backend."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from cglint.verify.compiled import regions, kept_outputs  # noqa: E402
from cglint.verify.guards import bytecode  # noqa: E402
from cglint.verify.findings.recorder import Recorder  # noqa: E402

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "compiled_mode"
DECODE, TRAIN, SCORING = (str(FIXTURES / n) for n in ("decode.py", "train.py", "scoring.py"))
cpu_only = pytest.mark.skipif(torch.cuda.is_available(), reason="tests the CPU trace mode")


def collector(gpu: bool = True):
    notes: list[str] = []
    return regions.CompileEventCollector(Recorder(), gpu=gpu, note=notes.append), notes


def found(c) -> set[tuple[str, int]]:
    return {(code, line) for code, _, line in c.recorder.observations}


# --- torch's messages, as torch formats them ----------------------------------------------------

def graph_break(path: str, line: int, reason: str, traceback: str = "") -> str:
    text = f"Graph break in user code at {path}:{line}\nGraph Break Reason: {reason}\n"
    return text + (f"\nUser code traceback:\n{traceback}" if traceback else "")


BRANCH = ("Data-dependent branching\n  Explanation: Detected data-dependent branching (e.g. `if my_tensor.sum() > 0:`). "
          "Dynamo does not support tracing dynamic control flow.")
SCALAR_IN_BRANCH = ("Encountered graph break when attempting to trace CALL_FUNCTION_EX: a variadic function call, e.g. "
                    "f(*args):\n\nData dependent operator\n  Explanation: Operator `aten._local_scalar_dense.default` has a "
                    "non-Tensor output whose value is dependent on the data of Tensor inputs.")
ITEM = ("Encountered graph break when attempting to trace CALL: a function call, e.g. f(x, y):\n\nUnsupported Tensor.item() "
        "call with capture_scalar_outputs=False\n  Explanation: Dynamo does not support tracing `Tensor.item()` with "
        "config.capture_scalar_outputs=False.")
LOGGER = ("Encountered graph break when attempting to trace CALL: a function call, e.g. f(x, y):\n\nlogging.Logger method "
          "not supported for non-export cases\n  Explanation: logging.Logger methods are not supported for non-export cases.")
PRINT = ("Encountered graph break when attempting to trace CALL: a function call, e.g. f(x, y):\n\nFailed to trace builtin "
         "operator\n  Explanation: Dynamo does not know how to trace builtin operator `print` with argument types "
         "['str', 'int'] (has_kwargs False)")
BACKWARD = ("Encountered graph break when attempting to trace CALL: a function call, e.g. f(x, y):\n\nAttempted to call "
            "function marked as skipped\n  Explanation: Dynamo developers have intentionally marked that the function "
            "`backward` in file `torch/autograd/__init__.py` should not be traced.")


def test_each_graph_break_is_reported_under_the_rule_that_claims_its_construct():
    c, notes = collector()
    c.handle("torch._dynamo.symbolic_convert.__graph_breaks", graph_break(DECODE, 18, SCALAR_IN_BRANCH))
    c.handle("torch._dynamo.symbolic_convert.__graph_breaks", graph_break(DECODE, 18, BRANCH))
    c.handle("torch._dynamo.symbolic_convert.__graph_breaks", graph_break(DECODE, 19, PRINT))
    c.handle("torch._dynamo.symbolic_convert.__graph_breaks", graph_break(TRAIN, 24, ITEM))
    c.handle("torch._dynamo.symbolic_convert.__graph_breaks", graph_break(TRAIN, 24, LOGGER))
    # `if t.any():` first breaks on the scalar the branch reads: still the branch (CG203), not a sync (CG112)
    assert found(c) == {("CG203", 18), ("CG508", 19), ("CG112", 24), ("CG508", 24)}
    assert not notes


def test_a_break_inside_a_library_call_is_reported_at_the_users_line_in_torchs_traceback():
    traceback = (f'  File "{TRAIN}", line 35, in fit\n    losses.append(self.step_fn(tokens, targets, lr))\n'
                 f'  File "{TRAIN}", line 22, in train_step\n    loss.backward()\n'
                 f'  File "{os.path.dirname(torch.__file__)}/_tensor.py", line 623, in backward\n    torch.autograd.backward(\n')
    c, notes = collector()
    c.handle("torch._dynamo.symbolic_convert.__graph_breaks",
             graph_break(f"{os.path.dirname(torch.__file__)}/_tensor.py", 623, BACKWARD, traceback))
    # no rule names a graph break at `loss.backward()`: a note with its line, no finding
    assert found(c) == set()
    assert notes == [f"graph break at {os.path.relpath(TRAIN)}:22 that no rule names: Attempted to call function marked "
                     "as skipped; Explanation: Dynamo developers have intentionally marked that the function `backward` "
                     "in file `torch/autograd/__init__.py` should not be traced."]
    # the duplicate torch logs later has no traceback: nothing new
    c.handle("torch._dynamo.symbolic_convert.__graph_breaks",
             f"Graph break (user stack suppressed due to duplicate graph break) in user code at "
             f"{os.path.dirname(torch.__file__)}/_tensor.py:623\nGraph Break Reason: {BACKWARD}")
    assert len(notes) == 1 and found(c) == set()


def test_a_recompile_on_an_attribute_is_reported_where_the_function_reads_it():
    c, _ = collector()
    c.handle("torch._dynamo.guards.__recompiles",
             f"Recompiling function decode_step in {DECODE}:15\n    triggered by the following guard failure(s):\n"
             "    - 0/0: L['self'].steps_taken == 0")
    assert found(c) == {("CG603", 17)}  # `self.steps_taken += 1`
    what = next(iter(c.recorder.observations.values())).what
    assert what == "`decode_step` recompiled: guard failed: L['self'].steps_taken == 0"


def test_a_recompile_on_a_guarded_scalar_names_the_line_in_torchs_user_stack():
    c, _ = collector()
    c.handle("torch._dynamo.guards.__recompiles",
             f"Recompiling function torch_dynamo_resume_in_train_step_at_22 in {TRAIN}:22\n"
             "    triggered by the following guard failure(s):\n"
             "    - 2/0: ___stack2 == 1.2728394269943237   # logger.debug(...)\n"
             f'    - User stack trace:\n    -   File "{TRAIN}", line 24, in torch_dynamo_resume_in_train_step_at_22\n')
    assert found(c) == {("CG603", 24)}


def caller_of_compiled(c, message):
    """Emit `message` from inside a function called at a known line (the 'call site')."""
    def decode_step(tokens, temperature):  # the compiled function: skipped when looking for its caller
        c.handle("torch._dynamo.guards.__recompiles", message)
    decode_step(None, 1.0)  # the call site
    return sys._getframe().f_lineno - 1


def test_a_recompile_for_a_new_shape_or_a_changed_argument_is_reported_at_the_call():
    c, _ = collector()
    c._parameters[("decode_step", __file__, 0)] = ("tokens", "temperature")
    shape = (f"Recompiling function decode_step in {__file__}:0\n    triggered by the following guard failure(s):\n"
             "    - 0/1: tensor 'tokens' size mismatch at index 1. expected 8, actual 9")
    line = caller_of_compiled(c, shape)
    number = (f"Recompiling function decode_step in {__file__}:0\n    triggered by the following guard failure(s):\n"
              "    - 0/2: L['temperature'] == 0.7")
    caller_of_compiled(c, number)
    call = caller_of_compiled.__code__.co_firstlineno + 4
    assert line == call
    assert found(c) == {("CG703", call), ("CG604", call)}


def test_the_recompile_limit_warning_says_the_function_now_runs_eagerly():
    c, _ = collector()
    c.handle("torch._dynamo.convert_frame",
             f"torch._dynamo hit config.recompile_limit (8)\n   function: 'decode_step' ({DECODE}:15)\n"
             "   last reason: 0/7: L['self'].steps_taken == 7\n"
             'To log all recompilation reasons, use TORCH_LOGS="recompiles".')
    (obs,) = c.recorder.observations.values()
    assert (obs.code, obs.where.line) == ("CG603", 17)
    assert "runs it eagerly from now on" in obs.what


def test_skipped_cudagraphs_are_reported_at_the_line_torch_names():
    c, _ = collector()
    c.handle("torch._inductor.cudagraph_utils.__cudagraphs",
             f'skipping cudagraphs due to mutated inputs (1 instances). Found from : \n   File "{SCORING}", line 10, '
             "in encode\n    lengths.clamp_(max=tokens.shape[1])\n")
    assert found(c) == {("CG957", 10)}
    assert next(iter(c.recorder.observations.values())).what == (
        "Inductor skipped CUDA graphs: skipping cudagraphs due to mutated inputs (1 instances).")


def test_an_overwritten_output_read_after_torch_invalidated_it_is_reported_at_the_read():
    def keep_and_read():
        raise RuntimeError("Error: accessing tensor output of CUDAGraphs that has been overwritten by a subsequent run. "
                           "Stack trace: File decode.py, line 16. To prevent overwriting, clone the tensor")
    c, _ = collector()
    try:
        keep_and_read()
    except RuntimeError as exc:
        c.script_raised(exc)
    read = keep_and_read.__code__.co_firstlineno + 1
    assert found(c) == {("CG956", read)}


def test_an_unmapped_message_or_a_new_format_is_ignored():
    c, notes = collector()
    for message in ("Checkpointing cuda caching allocator state. Number of checkpoints 1", "Graph break in user code",
                    "Recompiling function f in nowhere.py:3"):
        c.handle("torch._inductor.cudagraph_trees.__cudagraphs", message)
    assert found(c) == set() and not notes


# --- the caller's bytecode: where an output goes, where a kept one is read or stored ---------------

def decode_loop(step, tokens, n):
    kept = []
    for _ in range(n):
        logits = step(tokens)
        kept.append(logits)
        tokens = logits.argmax(-1)
    return kept


def two_calls(embed, a, b):
    first = embed(a)
    second, _ = embed(b)
    return (first - second).abs().max()


def offset_of_call(fn, callee: str) -> int:
    """The offset of the CALL of `callee` in fn (as f_lasti is while the callee runs)."""
    import dis

    ins = list(dis.get_instructions(fn.__code__))
    start = next(i for i, x in enumerate(ins) if x.argval == callee and x.opname.startswith("LOAD"))
    return next(x.offset for x in ins[start:] if x.opname.startswith("CALL"))


def test_the_names_an_output_is_bound_to_read_from_bytecode():
    assert kept_outputs._store_targets(decode_loop.__code__, offset_of_call(decode_loop, "step")) == {"logits"}
    at = offset_of_call(two_calls, "embed")
    assert kept_outputs._store_targets(two_calls.__code__, at) == {"first"}
    calls = [o for o, op, *_ in bytecode.instructions(two_calls.__code__) if op.startswith("CALL")]
    assert kept_outputs._store_targets(two_calls.__code__, calls[1]) == {"second", "_"}  # `second, _ = embed(b)`


def test_a_kept_name_is_reported_at_its_next_read_and_a_container_where_it_is_filled():
    first_line = two_calls.__code__.co_firstlineno
    calls = [o for o, op, *_ in bytecode.instructions(two_calls.__code__) if op.startswith("CALL")]
    assert kept_outputs._next_read(two_calls.__code__, calls[1], "first") == first_line + 3
    assert kept_outputs._next_read(two_calls.__code__, calls[1], "unused") is None
    loop_line = decode_loop.__code__.co_firstlineno
    assert kept_outputs._store_line(decode_loop.__code__, "kept", None) == loop_line + 4
    # in a loop, a read before the call counts: the loop comes back to it
    assert kept_outputs._next_read(decode_loop.__code__, offset_of_call(decode_loop, "step"), "tokens") == loop_line + 3


class FakeOutput:
    """A stand-in for a CUDA-graph output (no GPU here): `stale` marks the ones a later call overwrote."""

    def __init__(self, stale: bool):
        self.stale = stale

    def argmax(self, dim):
        return None

    def __sub__(self, other):
        return torch.zeros(1)


@pytest.fixture
def stale_by_flag(monkeypatch):
    monkeypatch.setattr(kept_outputs, "_is_stale", lambda value, ranges: isinstance(value, FakeOutput) and value.stale)
    monkeypatch.setattr(kept_outputs, "_holds_stale", lambda value, ranges, tail: isinstance(value, list) and any(
        isinstance(v, FakeOutput) and v.stale for v in value))


def run_holders(c, frame):
    kept_outputs.KeptOutputs(c)._frame_holders(frame, [(0, 1)])


def test_outputs_kept_in_a_list_across_calls_are_reported_where_the_list_is_filled(stale_by_flag):
    c, _ = collector()
    out = FakeOutput(stale=True)

    def step(tokens):
        run_holders(c, sys._getframe(1))
        return out

    decode_loop(step, torch.zeros(2, 3), 2)
    assert found(c) == {("CG956", decode_loop.__code__.co_firstlineno + 4)}


def test_an_earlier_output_under_another_name_is_reported_where_it_is_read(stale_by_flag):
    c, _ = collector()
    out = FakeOutput(stale=True)

    def embed(x):
        run_holders(c, sys._getframe(1))
        return (out, out) if x == "b" else out

    two_calls(embed, "a", "b")
    assert found(c) == {("CG956", two_calls.__code__.co_firstlineno + 3)}


def test_a_rebound_output_or_a_clone_is_not_kept(stale_by_flag):
    c, _ = collector()

    def clean_loop(step, tokens, n):
        kept = []
        for _ in range(n):
            logits = step(tokens)  # rebinding the name is not keeping
            kept.append(FakeOutput(stale=False))  # a copy
        return kept, logits

    def step(tokens):
        run_holders(c, sys._getframe(1))
        return FakeOutput(stale=True)

    clean_loop(step, None, 3)
    assert found(c) == set()


# --- `cglint verify` on the CPU: Dynamo's eager backend --------------------------------------------

def verify(script: str) -> dict:
    done = subprocess.run([sys.executable, "-m", "cglint", "verify", "--format", "json", script], cwd=FIXTURES,
                          capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PYTHONPATH": str(FIXTURES.parent.parent)})
    return json.loads(done.stdout)


@cpu_only
def test_verify_on_the_cpu_reports_dynamos_graph_breaks_recompiles_and_shapes_of_the_decode_loop():
    report = verify("decode.py")
    assert {(f["code"], f["line"]) for f in report["findings"]} == {("CG603", 17), ("CG203", 18), ("CG703", 27)}
    assert {f["path"] for f in report["findings"]} == {"decode.py"}
    assert regions.CPU_NOTE in report["notes"]
    assert report["run"]["completed"]
    # print() on line 19 runs only when the logits hold a NaN: Dynamo never traced it, so no CG508


@cpu_only
def test_verify_on_the_cpu_finds_nothing_in_the_clean_decode_loop_and_says_what_it_could_not_see():
    report = verify("decode_clean.py")
    assert report["findings"] == []
    assert regions.CPU_NOTE in report["notes"]


class CachedOutput(torch.nn.Module):
    """Returns the same tensor object on every call, as CUDA-graph trees do on replay."""

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)
        self.out = torch.zeros(2, 4)

    def forward(self, x):
        return self.out.copy_(self.lin(x))


def test_a_compiled_module_keeps_its_type_and_an_earlier_output_read_later_is_reported(monkeypatch):
    monkeypatch.setattr(kept_outputs, "_on_gpu", lambda t: True)  # no GPU here: the CPU tensors stand in
    c, notes = collector()
    embed = c.wrap(torch.compile(CachedOutput(), backend="eager"), None)
    assert isinstance(embed, torch.nn.Module)
    with torch.no_grad():
        first = embed(torch.randn(2, 4))
        second = embed(torch.randn(2, 4))
        (first - second).abs().max()  # reads `first`, which now holds the second call's values
    read = sys._getframe().f_lineno - 1
    assert found(c) == {("CG956", read)} and not notes
