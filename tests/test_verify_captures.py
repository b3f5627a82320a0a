"""A capture's record (cglint/verify/run/captures.py): its label, and its JSON both ways."""
from __future__ import annotations

from cglint.findings import Region
from cglint.verify.run.captures import NO_USER_FRAME, CaptureRecord


def test_the_label_is_path_line_and_kind():
    record = CaptureRecord.at(Region("run.py", 12, "torch.cuda.graph"))
    assert record.label == "run.py:12 (torch.cuda.graph)"
    assert CaptureRecord.at(Region("run.py", 12, "torch.cuda.graph"), "torch.compile").label == "run.py:12 (torch.compile)"


def test_a_capture_with_no_user_frame_is_named_by_what_stands_for_it():
    assert CaptureRecord.at(None, "torch.cuda.graph").label == "?"
    record = CaptureRecord.at(None, no_frame=NO_USER_FRAME)
    assert (record.label, record.path, record.line, record.kind) == (NO_USER_FRAME, NO_USER_FRAME, 0, "?")


def test_status_follows_the_outcome_and_the_replays():
    site = Region("run.py", 12, "torch.cuda.graph")
    assert CaptureRecord.at(site).status == "not-replayed"
    assert CaptureRecord.at(site, replays=2).status == "ok"
    assert CaptureRecord.at(site, ok=False, replays=2).status == "failed"


def test_the_json_reads_back_as_the_same_record():
    for record in (CaptureRecord.at(Region("pkg/model.py", 40, "CUDAGraph.capture_begin"), capture_seconds=0.0123,
                                    pool_bytes=2**20, replays=3),
                   CaptureRecord.at(Region("run.py", 7, "torch.cuda.graph"), ok=False, error="operation not permitted"),
                   CaptureRecord.at(None, no_frame=NO_USER_FRAME)):
        data = record.to_json()
        assert set(data) == {"path", "line", "kind", "status", "capture_ms", "pool_bytes", "replays", "error"}
        again = CaptureRecord.from_json(data)
        assert again.to_json() == data and again.label == record.label
