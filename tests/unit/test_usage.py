"""`fleet usage` is a pure function of job records and now, tested by table."""

import pytest

from core.errors import FleetError
from fleet.query import usage as U
from state.jobrecord import JobRecord

NOW = 1_700_000_000.0
H = 3600.0
DAY = 86400.0


def rec(
    owner="alice",
    state="succeeded",
    started=None,
    finished=None,
    gpu=None,
    cores=None,
    created=NOW - H,
) -> JobRecord:
    """A record as a worker leaves it (None: the field is not stored)."""
    fields = {
        "job_id": "j",
        "owner": owner,
        "state": state,
        "created_at": created,
        "started_at": started,
        "finished_at": finished,
        "gpu": gpu,
        "cores": cores,
    }
    return JobRecord.from_hash({k: str(v) for k, v in fields.items() if v is not None})


@pytest.mark.parametrize(
    "record, jobs, failures, gpu_h, core_h",
    [
        # two hours on two GPUs and 8 cores
        (rec(started=NOW - 3 * H, finished=NOW - H, gpu="0:A,1:A", cores=8), 1, 0, 4.0, 16.0),
        # running: counted up to now
        (rec(state="running", started=NOW - H / 2, gpu="3:H100", cores=4), 1, 0, 0.5, 2.0),
        # failed after one hour on CPU only
        (rec(state="failed", started=NOW - 2 * H, finished=NOW - H, cores=2), 1, 1, 0.0, 2.0),
        # queued: no run counts, even an old run's times left in its record
        (
            rec(state="queued", started=NOW - 2 * H, finished=None, gpu=None, cores=4),
            1,
            0,
            0.0,
            0.0,
        ),
        # a run that began before the window counts only inside it
        (
            rec(
                started=NOW - 8 * DAY,
                finished=NOW - 7 * DAY + H,
                gpu="0:A",
                cores=1,
                created=NOW - 9 * DAY,
            ),
            1,
            0,
            1.0,
            1.0,
        ),
        # wholly before the window: not counted at all
        (
            rec(
                state="failed",
                started=NOW - 9 * DAY,
                finished=NOW - 8 * DAY,
                gpu="0:A",
                created=NOW - 10 * DAY,
            ),
            0,
            0,
            0,
            0,
        ),
        # cancelled while running: its run still used what it held
        (rec(state="cancelled", started=NOW - H, finished=NOW, gpu="0:A", cores=1), 1, 0, 1.0, 1.0),
        # no cores reported (a worker before cores were): GPU-hours only
        (rec(started=NOW - H, finished=NOW, gpu="0:A"), 1, 0, 1.0, 0.0),
    ],
)
def test_one_record_adds_its_run_inside_the_window(record, jobs, failures, gpu_h, core_h):
    got = U.usage([record], since_s=7 * DAY, now=NOW)
    if not jobs:
        assert got == []
        return
    (u,) = got
    assert (u.owner, u.jobs, u.failures) == ("alice", jobs, failures)
    assert u.gpu_hours == pytest.approx(gpu_h) and u.core_hours == pytest.approx(core_h)


def test_owners_are_summed_and_ordered_by_gpu_hours():
    records = [
        rec("alice", started=NOW - H, finished=NOW, gpu="0:A", cores=2),
        rec("bob", started=NOW - H, finished=NOW, gpu="0:A,1:A", cores=2),
        rec("bob", "failed", started=NOW - H, finished=NOW, cores=4),
        rec(None, started=NOW - H, finished=NOW, cores=1),
    ]
    got = [
        (u.owner, u.jobs, u.failures, u.gpu_hours, u.core_hours)
        for u in U.usage(records, since_s=DAY, now=NOW)
    ]
    assert got == [("bob", 2, 1, 2.0, 6.0), ("alice", 1, 0, 1.0, 2.0), (U.NO_OWNER, 1, 0, 0.0, 1.0)]


@pytest.mark.parametrize(
    "text, seconds",
    [
        ("7d", 7 * DAY),
        ("12h", 12 * H),
        ("30m", 1800),
        ("2w", 14 * DAY),
        ("1.5h", 1.5 * H),
        (" 7D ", 7 * DAY),
    ],
)
def test_since_reads_a_number_and_a_unit(text, seconds):
    assert U.parse_since(text) == seconds


@pytest.mark.parametrize("text", ["7", "d", "0d", "-1d", "7 days", "1y"])
def test_a_bad_since_names_the_value_and_the_form(text):
    with pytest.raises(FleetError, match=r"--since .*e\.g\. 7d"):
        U.parse_since(text)


def test_json_rounds_hours():
    v = U.UsageView([U.OwnerUsage("alice", 1, 0, 1 / 3, 2 / 3)], 7 * DAY, NOW)
    assert v.to_dict()["owners"] == [
        {"owner": "alice", "jobs": 1, "failures": 0, "gpu_hours": 0.333, "core_hours": 0.667}
    ]


def test_a_gangs_run_counts_every_members_resources():
    # the record keeps one member's GPU and cores; each of its 3 hosts held as much
    gang = JobRecord.from_hash(
        {
            "job_id": "g",
            "owner": "alice",
            "state": "succeeded",
            "created_at": str(NOW - 2 * H),
            "started_at": str(NOW - H),
            "finished_at": str(NOW),
            "gpu": "0:A",
            "cores": "2",
            "gang_hosts": "a,b,c",
        }
    )
    (u,) = U.usage([gang], since_s=7 * DAY, now=NOW)
    assert u.gpu_hours == pytest.approx(3.0) and u.core_hours == pytest.approx(6.0)
