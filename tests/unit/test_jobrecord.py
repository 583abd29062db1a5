"""The one decoder and encoder of a job's record (state.jobrecord), with no Redis: a round
trip, a hash written by older code, and bad stored text that never crashes a reader."""

import json

import pytest

from state.jobrecord import JobRecord, JobState, QueuedCopy, RunEnd, record_end

FULL = JobRecord(
    "0123456789abcdef",
    "gbt[seed=1]",
    JobState.FAILED,
    queue="cpu",
    attempts=2,
    worker="w1",
    gpu="0:NVIDIA H100",
    created_at=1.5e9,
    queued_at=1.5e9 + 1,
    started_at=1.5e9 + 2,
    finished_at=1.5e9 + 3.25,
    last_error="job gbt (0123) exited with status 1; last output:\nboom",
    artifact={"uri": "s3://b/k", "sha256": "ab" * 32, "size": 10},
    progress={"metrics": {"loss": 0.5}},
    result={"metrics": {"loss": 0.25}},
    runs=3,
    owner="alice",
    preemptions=1,
    preempted_by={"job_id": "u", "at": 1.5e9},
    preempted=[{"job_id": "v"}],
    spec={"model": "gbt"},
    trained={"at": 1.5e9 + 2.5, "host": "w1", "dir": "/w/j"},
    checkpoint={"key": "k", "size": 3},
    cores=4,
    end=RunEnd.FAILED,
    end_reason="exit 1: ValueError: boom",
    end_detail="boom\nValueError: boom",
    gpu_s=7200.5,
    core_s=28800.0,
    charged="t1 1500000003.25",
    pri_queue="cpu",
    fallback_queue="cuda",
    fb_grace_s=0.0,
    pushes=2,
    search="5eac4",
    trial=0,
    params={"lr": 0.01, "layers": 3},
    copies=(QueuedCopy("cur", "fleet:q:cpu", "{}"), QueuedCopy("pri", "fleet:q:cpu", "{}")),
)

# a failed job's hash as the code before `end` fields wrote it (lua/publish, claim, finish)
OLD = {
    "job_id": "feedface0001",
    "name": "old",
    "state": "failed",
    "queue": "cpu",
    "attempts": "1",
    "worker": "w",
    "created_at": "1700000000.5",
    "started_at": "1700000001",
    "finished_at": "1700000002",
    "last_error": "job old (feedface0001) exited with status 1; last output:\nValueError: x",
    "spec": json.dumps({"command": ["false"]}),
    "pri_key": "cpu",
    "pri_msg": "{}",
    "msg": "{}",
    "cur_key": "cpu",
    "pri_queue": "cpu",
    "pushes": "1",
    "token": "t",
    "heartbeat_at": "1700000001.5",
}


def test_a_record_reads_back_equal_from_the_fields_it_stores():
    stored = FULL.to_hash()
    assert all(isinstance(v, str) for v in stored.values())
    assert stored["end"] == "failed" and stored["trained_host"] == "w1"
    assert stored["pri_msg"] == "{}" and stored["pri_key"] == "fleet:q:cpu"
    assert JobRecord.from_hash(stored) == FULL and FULL.charged_until == 1.5e9 + 3.25
    shown = FULL.to_dict()
    assert "t1" not in str(shown) and shown["charged_until"] == 1.5e9 + 3.25  # no run token


def test_a_bare_record_round_trips_with_its_defaults():
    bare = JobRecord("j1", "j1", JobState.QUEUED)
    assert bare.to_hash() == {"job_id": "j1", "name": "j1", "state": "queued"}
    assert JobRecord.from_hash(bare.to_hash()) == bare


def test_a_record_written_before_end_fields_decodes_and_says_its_first_error_line():
    rec = JobRecord.from_hash(OLD)
    assert (rec.state, rec.attempts, rec.runs) == (JobState.FAILED, 1, 1)
    assert rec.created_at == 1700000000.5 and rec.spec == {"command": ["false"]}
    assert rec.end is None and rec.problems == () and rec.published
    assert rec.reason == "job old (feedface0001) exited with status 1; last output:"


@pytest.mark.parametrize(
    "field, text",
    [
        ("progress", "{not json"),
        ("result", "[1,"),
        ("preempted_by", "nan-ish{"),
        ("spec", "{{"),
        ("started_at", "yesterday"),
        ("attempts", "two"),
        ("state", "paused"),
        ("end", "exploded"),
    ],
)
def test_a_field_that_does_not_decode_is_left_at_its_default_and_named(field, text):
    rec = JobRecord.from_hash({**OLD, field: text})
    assert rec.problems == (field,)
    assert rec.job_id == "feedface0001" and rec.name == "old"  # the rest still reads
    assert rec.to_dict()["problems"] == [field]


def test_the_end_fields_a_worker_records_keep_one_line_and_the_texts_end():
    fields = record_end(RunEnd.TIMED_OUT, "timed out after 5s: tick 9", "x" * 5000 + "tail")
    rec = JobRecord.from_hash({**OLD, **fields})
    assert rec.end is RunEnd.TIMED_OUT and rec.reason == "timed out after 5s: tick 9"
    assert len(rec.end_detail) == 4000 and rec.end_detail.endswith("tail")
