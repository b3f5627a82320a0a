"""Silent divergence at run time, located at the write: a host value a capture read and a later
line changed between replays is reported with that line (the finding's line or a related one),
and a change that cannot alter what the graph computes is not reported.

tests/data/replay_writers holds one program per mechanism (a directory, several modules where
the write sits in another module than the read) and its correct twin (`clean_*`), which keeps the
same-looking write but stays silent. `# write` marks the line that changes the value, `# read` the
captured read. Each program prints a verdict comparing replays with eager calls, which the CPU
stand-in reproduces: DIVERGES for a hazard, MATCHES for its twin.

- sampling_dataclass: a dataclass field written by another module (a `__setattr__` watch on the
  field's class names the writer).
- decode_offset: a Python int position advanced by the decode loop; its twin keeps the host int
  and a captured branch `state.pos == 0` whose outcome never changes (the test is re-evaluated).
- lr_param_group: `group["lr"]` read by a captured optimizer step, written by a scheduler module.
- lora_slots: a per-slot Python list entry read with a loop index and rewritten between replays.
- rope_buffer: a buffer rebound through `register_buffer` between replays.
- static_metadata: a dataclass of static inputs held in the dict the capture site unpacks,
  rebound instead of copied into.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from cglint.verify.guards import readplan, watchers, writers  # noqa: E402
from cglint.verify.run import cli  # noqa: E402

CASES = Path(__file__).resolve().parent / "data" / "replay_writers"
HAZARDS = sorted(p.name for p in CASES.iterdir() if p.is_dir() and not p.name.startswith(("clean_", "_")))


def marked(case: str, mark: str) -> set[tuple[str, int]]:
    found = set()
    for path in sorted((CASES / case).glob("*.py")):
        for n, line in enumerate(path.read_text("utf-8").splitlines(), 1):
            if line.rstrip().endswith(f"# {mark}"):
                found.add((path.name, n))
    return found


def run(case: str, tmp_path, monkeypatch, capfd) -> tuple[list[dict], str]:
    work = tmp_path / case
    shutil.copytree(CASES / case, work)
    monkeypatch.chdir(work)
    monkeypatch.syspath_prepend(str(work))
    cli.main(["--format", "json", "main.py"])
    out, err = capfd.readouterr()
    findings = [f for f in json.loads(out)["findings"] if f["severity"] in ("error", "warning")]
    return findings, err


def spots(finding: dict) -> set[tuple[str, int]]:
    return {(finding["path"], finding["line"])} | {(r["path"], r["line"]) for r in finding.get("related", ())}


@pytest.mark.parametrize("case", HAZARDS)
def test_the_write_between_replays_is_located(case, tmp_path, monkeypatch, capfd):
    findings, err = run(case, tmp_path, monkeypatch, capfd)
    assert "VERDICT DIVERGES" in err
    writes, reads = marked(case, "write"), marked(case, "read")
    assert writes and findings, findings
    for finding in findings:  # every finding names the write, and the read where one is marked
        assert spots(finding) & writes, finding
        if reads:
            assert spots(finding) & reads, finding


@pytest.mark.parametrize("case", HAZARDS)
def test_the_correct_twin_is_silent(case, tmp_path, monkeypatch, capfd):
    findings, err = run(f"clean_{case}", tmp_path, monkeypatch, capfd)
    assert "VERDICT MATCHES" in err
    assert findings == []


# --- the mechanisms alone (fast) ------------------------------------------------------------------

def _sites(fn):
    return {(s.text, s.line - fn.__code__.co_firstlineno): s for s in readplan.plan(fn.__code__)}


def test_a_read_feeding_a_test_with_constants_keeps_the_test():
    def step(self, params):
        causal = params.offset == 0
        if self.flags:
            pass
        scale = self.scale * 2
        return causal, scale, self.guidance > 1.0

    sites = _sites(step)
    assert sites[("params.offset", 1)].test == (("cmp", "==", 0),)
    assert sites[("self.flags", 2)].test == (("truth",),)
    assert sites[("self.scale", 4)].test == ()  # the value itself goes on into tensor work
    test = sites[("self.guidance", 5)].test
    assert readplan.derive(test, 7.5) is readplan.derive(test, 3.0) is True
    assert readplan.derive(test, 1.0) is False


def test_a_read_keyed_by_a_local_is_planned_per_line():
    def forward(self, x):
        out = x
        for slot in range(4):
            out = out * self.manager.scalings[slot]
        return out

    (site,) = readplan.var_sites(forward.__code__)
    assert site.steps == (("attr", "manager"), ("attr", "scalings"), ("var", "slot"))
    assert site.text == "self.manager.scalings[slot]"
    assert site.line in readplan.lines(forward.__code__)


def test_a_plain_objects_writer_is_kept_from_the_watch_on(monkeypatch):
    import dataclasses

    @dataclasses.dataclass
    class Params:
        temperature: float = 1.0

    def set_temperature(p, t):
        p.temperature = t

    params, other = Params(), Params()
    watchers.install()
    try:
        assert watchers.watch_object(params, "temperature")
        assert watchers.last_write(params, "temperature") is None
        set_temperature(params, 0.5)
        set_temperature(other, 0.25)  # an object no guard read: nothing kept
        seen = watchers.last_write(params, "temperature")
        assert seen is not None and seen.line == set_temperature.__code__.co_firstlineno + 1
        assert watchers.last_write(other, "temperature") is None
        assert type(params) is Params and params == Params(0.5)
    finally:
        watchers.uninstall()
    assert "__setattr__" not in vars(Params)  # put back


def test_entry_stores_with_a_variable_key_are_found():
    def load(self, index, value):
        self.scalings[index] = value

    found = writers.stores(load.__code__, "item", writers.ANY)
    assert [(line - load.__code__.co_firstlineno, target) for line, _, target in found] == \
        [(1, ("local", "self", ("scalings",)))]
