"""How a run's end is named (tasks.run.run_end), written (tasks.joblog.end_fields) and shown
(fleet.query.logs), with no Redis."""

from __future__ import annotations

from datetime import datetime

import pytest

from fleet.query.logs import LOST, NO_END_MARK, LogEntry, Runs
from state.jobrecord import JobState
from tasks.joblog import END_DETAIL_CHARS, end_fields
from tasks.run import Ended, Outcome, RunEnd, Stop, failure_end, failure_reason, run_end

FAILED_EXIT_1 = "job j (0123456789ab) exited with status 1; last output:\nboom"


@pytest.mark.parametrize(
    "ended, stop, record, expected",
    [
        (Ended(Outcome.SUCCEEDED), None, None, (RunEnd.SUCCEEDED, "")),
        (
            Ended(Outcome.FAILED, FAILED_EXIT_1, end=RunEnd.FAILED, detail="exit 1"),
            None,
            None,
            (RunEnd.FAILED, "exit 1"),
        ),
        (
            Ended(Outcome.FAILED, "x", end=RunEnd.TIMED_OUT, detail="after 5s"),
            None,
            None,
            (RunEnd.TIMED_OUT, "after 5s"),
        ),
        (
            Ended(Outcome.FAILED, FAILED_EXIT_1),
            None,
            None,
            (RunEnd.FAILED, FAILED_EXIT_1.splitlines()[0]),
        ),
        (
            Ended(Outcome.RELEASED, "worker shutting down"),
            Stop.SHUTDOWN,
            None,
            (RunEnd.HANDED_BACK, "worker shutting down"),
        ),
        (
            Ended(Outcome.RELEASED, "preempted by urgent-x (priority 9)"),
            None,
            None,
            (RunEnd.HANDED_BACK, "preempted by urgent-x (priority 9)"),
        ),
        (Ended(Outcome.STOPPED, "cancelled"), Stop.CANCELLED, None, (RunEnd.CANCELLED, "")),
        (
            Ended(Outcome.STOPPED, "cancelled while uploading"),
            Stop.CANCELLED,
            None,
            (RunEnd.CANCELLED, ""),
        ),
        (
            Ended(Outcome.STOPPED, "lost"),
            Stop.LOST,
            None,
            (RunEnd.LOST, "another run owns the job"),
        ),
        (
            Ended(Outcome.STOPPED, "lost"),
            Stop.LOST,
            JobState.QUEUED,
            (RunEnd.LOST, "the job went back to its queue"),
        ),
        (
            Ended(Outcome.STOPPED, "lost"),
            Stop.LOST,
            JobState.SUCCEEDED,
            (RunEnd.LOST, "the job was recorded succeeded"),
        ),
        (Ended(Outcome.STOPPED, "lost"), None, None, (RunEnd.LOST, "lost")),
    ],
)
def test_a_runs_end_is_named_by_how_the_delivery_ended_and_what_its_lease_heard(
    ended, stop, record, expected
):
    assert run_end(ended, stop, record) == expected


TRACEBACK = [
    "step 2",
    "Traceback (most recent call last):",
    '  File "<string>", line 4, in <module>',
    "ValueError: learning_rate must be positive, got -1",
]
VERDICT = (
    "stopped: used 5.00 GiB of GPU memory on GPU 0, over its budget of 4 GiB "
    "(min_vram_gib with share_gpu); raise min_vram_gib to what it needs, or drop "
    "share_gpu to hold a whole GPU"
)


@pytest.mark.parametrize(
    "end, words, tail, last, line",
    [
        (
            RunEnd.FAILED,
            "exit 1",
            TRACEBACK,
            False,
            "exit 1: ValueError: learning_rate must be positive, got -1",
        ),
        (
            RunEnd.FAILED,
            "exit 2",
            ["usage: train.py [-h]", "train.py: error: bad flag", "", ""],
            False,
            "exit 2: train.py: error: bad flag",
        ),
        (
            RunEnd.FAILED,
            "exit -9",
            ["epoch 3", 'FLEET_METRIC {"loss": 1}'],
            False,
            "exit -9: epoch 3",
        ),
        (RunEnd.TIMED_OUT, "after 5s", ["tick 9"], False, "timed out after 5s: tick 9"),
        (RunEnd.FAILED, "exit 1", [], False, "exit 1 (no output)"),
        (
            RunEnd.FAILED,
            "exit 1",
            ["torch.cuda.OutOfMemoryError: CUDA out of memory", "during cleanup"],
            False,
            "exit 1: torch.cuda.OutOfMemoryError: CUDA out of memory",
        ),
        (
            RunEnd.FAILED,
            "over its VRAM budget",
            ["KeyboardInterrupt", VERDICT],
            True,
            "over its VRAM budget: " + VERDICT,
        ),
    ],
)
def test_a_failed_runs_reason_is_its_end_and_the_output_line_that_says_why(
    end, words, tail, last, line
):
    assert failure_reason(end, words, tail, last=last) == line


@pytest.mark.parametrize(
    "stopped, returncode, expected",
    [
        (None, 1, (RunEnd.FAILED, "exit 1")),
        (None, -9, (RunEnd.FAILED, "exit -9")),
        (Stop.TIMEOUT, -15, (RunEnd.TIMED_OUT, "after 2.5s")),
        (Stop.OVER_BUDGET, -15, (RunEnd.FAILED, "over its VRAM budget")),
    ],
)
def test_a_failed_process_is_named_by_its_exit_status_or_why_it_was_stopped(
    stopped, returncode, expected
):
    assert failure_end(stopped, returncode, 2.5) == expected


def test_an_end_mark_says_how_the_run_ended_with_one_short_line_of_detail():
    assert end_fields(RunEnd.SUCCEEDED) == {"outcome": "succeeded"}
    assert end_fields(RunEnd.FAILED, "exit 1; queued again, 2 attempt(s) left") == {
        "outcome": "failed",
        "detail": "exit 1; queued again, 2 attempt(s) left",
    }
    long = end_fields(RunEnd.FAILED, "ValueError: " + "x" * 1000 + "\nsecond line")
    assert len(long["detail"]) == END_DETAIL_CHARS and long["detail"].endswith("…")
    assert end_fields(RunEnd.LOST, "  \n") == {"outcome": "lost"}


def mark(event: str, run: int, worker: str = "w1", **fields) -> LogEntry:
    return LogEntry(
        f"{1_700_000_000_000 + run}-{event}",
        1_700_000_000.0,
        event=event,
        run=run,
        worker=worker,
        **fields,
    )


@pytest.mark.parametrize(
    "entry, expected",
    [
        (mark("start", 3), "--- attempt 3 on w1 started {when} ---"),
        # a mark written before outcomes were
        (
            mark("end", 3),
            "--- attempt 3 on w1 ended {when} ---",
        ),
        (mark("end", 3, outcome="succeeded"), "--- attempt 3 on w1 ended {when}: succeeded ---"),
        (
            mark("end", 1, outcome="failed", detail="exit 1"),
            "--- attempt 1 on w1 ended {when}: failed (exit 1) ---",
        ),
        (
            mark("end", 2, outcome="handed back", detail="worker shutting down"),
            "--- attempt 2 on w1 ended {when}: handed back (worker shutting down) ---",
        ),
    ],
)
def test_a_run_mark_reads_as_its_number_worker_time_and_outcome(entry, expected):
    when = datetime.fromtimestamp(entry.at).strftime("%Y-%m-%d %H:%M:%S")
    assert entry.text() == expected.format(when=when)


def test_a_run_whose_worker_died_without_an_end_mark_is_shown_lost_when_the_next_run_starts():
    line = LogEntry("1-0", 1.0, line="tick")
    entries = [
        mark("start", 1),
        line,
        mark("start", 2, worker="w2"),
        line,
        mark("end", 2, outcome="succeeded"),
    ]
    shown = list(Runs().through(entries))
    assert [(e.event, e.run, e.outcome) for e in shown] == [
        ("start", 1, None),
        (None, None, None),
        ("end", 1, LOST),
        ("start", 2, None),
        (None, None, None),
        ("end", 2, "succeeded"),
    ]
    assert shown[2].text() == f"--- attempt 1 on w1 ended: lost ({NO_END_MARK}) ---"
    assert "at" not in shown[2].to_dict() and shown[2].to_dict()["outcome"] == "lost"


def test_runs_remembers_an_open_run_between_reads():
    runs = Runs()
    assert [e.event for e in runs.through([mark("start", 1)])] == ["start"]
    assert runs.open is not None and runs.open.run == 1
    assert [e.event for e in runs.through([mark("end", 1, outcome="cancelled")])] == ["end"]
    assert runs.open is None
