"""A light capture's torch-call wrappers (cglint/verify/capture/callpatches.py) find what the
TorchFunctionMode finds in user code, and leave torch as they found it."""
from __future__ import annotations

import inspect
import threading

import pytest

from .helpers import expected_markers

torch = pytest.importorskip("torch")

from cglint.verify.capture.instrument import Instrumentation  # noqa: E402
from cglint.verify.findings.recorder import Recorder  # noqa: E402


class Sampler(torch.nn.Module):
    def __init__(self, vocab: int):
        super().__init__()
        self.proj = torch.nn.Linear(16, vocab)
        self.generator = torch.Generator().manual_seed(0)

    def forward(self, hidden, temperature):
        logits = self.proj(hidden)[:, -1, :] / temperature
        if logits.max() > 30:  # expect: CG201
            logits = logits.clamp(max=30)
        probs = logits.softmax(-1)
        ids = torch.multinomial(probs, 1, generator=self.generator)  # expect: CG304
        draft = probs.multinomial(1, generator=self.generator)  # expect: CG304
        keep = ids[ids > 0]  # expect: CG106
        finished = int(keep.numel() == 0 or ids.max().item() == 2)  # expect: CG101
        noise = torch.rand(4)  # expect: CG303
        print(f"finished={finished} noise={noise}")  # expect: CG103
        window = torch.arange(8).reshape(2, 4)[:, 1:3]  # plain indexing and factories: no finding
        return ids, draft, window + noise[:2]


def _findings(call_patches: bool) -> set[tuple[str, int]]:
    torch.manual_seed(0)
    sampler = Sampler(vocab=10)
    hidden = torch.randn(2, 3, 16)
    recorder = Recorder(phase="capture")
    with Instrumentation(recorder, gpu=False, operators=False, call_patches=call_patches):
        sampler(hidden, 0.7)
    return {(f.code, f.line) for f in recorder.findings()}


def _expected() -> set[tuple[str, int]]:
    lines, start = inspect.getsourcelines(Sampler.forward)
    inside = range(start, start + len(lines))
    return {(code, line) for code, line in expected_markers(open(__file__).read()) if line in inside}


def test_the_wrappers_find_what_the_function_mode_finds():
    assert _findings(call_patches=True) == _expected()
    assert _findings(call_patches=False) == _expected()


def test_torch_is_left_as_it_was():
    tensor_attributes, torch_attributes = dict(vars(torch.Tensor)), dict(vars(torch))
    _findings(call_patches=True)
    assert dict(vars(torch.Tensor)) == tensor_attributes
    assert dict(vars(torch)) == torch_attributes
    assert "item" not in vars(torch.Tensor)  # inherited from TensorBase, not left behind as a copy


def test_another_threads_calls_are_not_the_captures():
    recorder = Recorder(phase="capture")
    values = torch.arange(4.0)
    seen = []
    with Instrumentation(recorder, gpu=False, operators=False, call_patches=True):
        loader = threading.Thread(target=lambda: seen.append(values.sum().item()))
        loader.start()
        loader.join()
    assert seen == [6.0]
    assert recorder.findings() == []


def test_a_call_the_classifier_cannot_read_still_runs(monkeypatch):
    # Arguments no rule expected (a new torch keyword, an odd index) must never break the
    # user's capture: the call runs as it would without the verifier.
    from cglint.verify.capture import classify

    def unreadable(*args, **kwargs):
        raise TypeError("an argument the classifier does not know")

    monkeypatch.setattr(classify, "classify_call", unreadable)
    recorder = Recorder(phase="capture")
    steps = torch.arange(6.0).reshape(2, 3)
    with Instrumentation(recorder, gpu=False, operators=False, call_patches=True):
        last = steps[:, -1].to(torch.float64)
    assert last.tolist() == [2.0, 5.0]
    assert recorder.findings() == []


SAMPLING_MODULE = '''
from torch import nonzero, rand


def sample_ids(probs):
    noise = rand(probs.shape[-1])  # expect: CG303
    picked = nonzero(probs + noise > 0.9)  # expect: CG105
    return picked
'''


def test_a_torch_function_imported_by_name_is_wrapped_where_it_was_bound(tmp_path, monkeypatch):
    # `from torch import nonzero` binds the function before any capture: wrapping `torch.nonzero`
    # alone would leave the module's own name unseen.
    import importlib

    (tmp_path / "sampling_by_name.py").write_text(SAMPLING_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    sampling = importlib.import_module("sampling_by_name")
    probs = torch.rand(2, 8)  # outside: drawn inside, the test's own line would be a finding
    recorder = Recorder(phase="capture")
    with Instrumentation(recorder, gpu=False, operators=False, call_patches=True):
        sampling.sample_ids(probs)
    expected = {(code, line) for code, line in expected_markers(SAMPLING_MODULE)}
    assert {(f.code, f.line) for f in recorder.findings()} == expected
    assert sampling.nonzero is torch.nonzero and sampling.rand is torch.rand  # put back
