"""Silent divergence at run time (tests/data/replay_divergence): every host location a capture
read is guarded before each replay, a static input rebound in a container is reported where it
is rebound, and host state advanced by captured code where it advances.

Each program runs under `cglint verify` (CPU trace mode here: the stand-in graph's replay()
checks the guards and runs the captured operators again; a real capture where there is a GPU).
Every marked line is reported with its code and nothing else; each clean twin gets nothing. The
programs compare replays with eager calls and print a verdict, which the emulated replay
reproduces: a positive program's verdict is DIVERGES and its twin's MATCHES (run_gpu.sh there
checks the same on a GPU).
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from .helpers import expected_markers

torch = pytest.importorskip("torch")

from cglint.verify.guards import readplan  # noqa: E402
from cglint.verify.run import cli  # noqa: E402

CASES = Path(__file__).resolve().parent / "data" / "replay_divergence"


def verify(case: str, tmp_path, monkeypatch, capfd) -> tuple[list[dict], str]:
    text = (CASES / case).read_text("utf-8")
    (tmp_path / "job.py").write_text(text)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    cli.main(["--format", "json", "job.py"])
    out, err = capfd.readouterr()
    return json.loads(out)["findings"], err


def line_of(case: str, text: str) -> int:
    return next(n for n, line in enumerate((CASES / case).read_text("utf-8").splitlines(), 1) if text in line)


def related(findings: list[dict], line: int) -> list[int]:
    return [r["line"] for f in findings if f["line"] == line for r in f.get("related", ())]


@pytest.mark.parametrize("case", sorted(p.name for p in CASES.glob("*.py")))
def test_each_marked_line_is_reported_and_the_verdict_holds(case, tmp_path, monkeypatch, capfd):
    findings, err = verify(case, tmp_path, monkeypatch, capfd)
    markers = expected_markers((CASES / case).read_text("utf-8"))
    assert {(f["code"], f["line"]) for f in findings} == set(markers)
    assert all(f["path"] == "job.py" for f in findings)
    clean = case.startswith("clean_")
    assert ("VERDICT MATCHES" if clean else "VERDICT DIVERGES") in err
    if not clean:  # each change diverges on its own
        assert "MATCHES" not in err.replace("VERDICT MATCHES", "")


def test_class_attributes_name_the_write(tmp_path, monkeypatch, capfd):
    case = "class_attributes.py"
    findings, _ = verify(case, tmp_path, monkeypatch, capfd)
    for read, write in (("x * self.gain", "cls.gain = gain"), ("self.shift  #", "type(self).shift = shift"),
                        ("super().bias", "Augment.bias = -1.0")):
        assert related(findings, line_of(case, read)) == [line_of(case, write)]
    messages = " ".join(f["message"] for f in findings)
    assert "`super().bias` was 0.0 at capture and is -1.0 before this replay" in messages


def test_partials_and_module_state_say_what_changed(tmp_path, monkeypatch, capfd):
    case = "frozen_callables_and_globals.py"
    findings, _ = verify(case, tmp_path, monkeypatch, capfd)
    by_line = {f["line"]: f["message"] for f in findings}
    assert "`self.act` was partial(scaled, scale=2.0) at capture and is partial(scaled, scale=3.0)" in \
        by_line[line_of(case, "y = self.act(x)")]
    assert "`SOFTCAP` was partial(clamp, min=-4.0, max=4.0) at capture and is partial(clamp, min=-4.0, max=1.0)" in \
        by_line[line_of(case, "y = SOFTCAP(y)")]
    assert "`alpha` was 0.5" in by_line[line_of(case, "a * alpha")]
    assert related(findings, line_of(case, "a * alpha")) == [line_of(case, "alpha = value")]  # the nonlocal write
    assert "`FEATURES` was <Feature.NONE: 0>" in by_line[line_of(case, "in FEATURES")]
    assert related(findings, line_of(case, 'SETTINGS["scale"], x')) == [line_of(case, 'SETTINGS["scale"] = scale')]
    assert related(findings, line_of(case, "y = self.act(x)")) == [line_of(case, "head.act = functools.partial(scaled, scale=3.0)")]


def test_rebound_inputs_and_advanced_state_say_what_the_graph_keeps(tmp_path, monkeypatch, capfd):
    findings, _ = verify("rebound_inputs.py", tmp_path, monkeypatch, capfd)
    by_line = {f["line"]: f["message"] for f in findings}
    assert by_line[line_of("rebound_inputs.py", 'inputs["x"] = torch')].startswith(
        "`inputs['x']` is rebound to another tensor after the capture at job.py:")
    findings, _ = verify("advanced_state.py", tmp_path, monkeypatch, capfd)
    by_line = {f["line"]: f["message"] for f in findings}
    assert "`self.pos` is advanced by captured code: 1 before the capture, 2 after it" in \
        by_line[line_of("advanced_state.py", "self.pos += 1  #")]
    assert "the generator `schedule`" in by_line[line_of("advanced_state.py", "next(schedule)")]


def _texts(fn) -> set[tuple[str, str]]:
    return {(site.kind, site.text) for site in readplan.plan(fn.__code__)}


def test_the_bytecode_names_super_reads_calls_and_counters():
    class Base:
        factor = 1.0

    class Head(Base):
        def forward(self, x, state):
            y = x * super().factor + self.act(x)
            if self.mode.startswith("g"):
                y = super().shift(y)
            self.pos += 1
            state.step = state.step + 1
            self.stats["calls"] += 1
            saved = self.flag
            return y, saved

    reads = _texts(Head.forward)
    assert {("super", "super().factor"), ("super", "super().shift"), ("local", "self.act"),
            ("local", "self.mode"), ("local", "self.mode.startswith")} <= reads
    assert [s.text for s in readplan.counters(Head.forward.__code__)] == ["self.pos", "state.step", "self.stats['calls']"]


def test_a_partial_is_guarded_by_what_it_froze():
    import functools

    from cglint.verify.guards.guardset import frozen, same

    def f(x, scale=1.0):
        return x * scale

    p = functools.partial(f, 2, scale=1.5)
    snapshot = frozen(p)
    assert same(snapshot, frozen(functools.partial(f, 2, scale=1.5)))  # rebound to an equal one
    p.keywords["scale"] = 3.0
    assert not same(snapshot, frozen(p))
    assert not same(snapshot, frozen(functools.partial(max, 2, scale=1.5)))
    assert repr(snapshot) == "partial(f, 2, scale=1.5)"
