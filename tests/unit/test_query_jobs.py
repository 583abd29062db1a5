"""The jobs query layer's pure parts: ages, how a run ended in one line, name and host globs,
state filters, and which rows a capped view keeps."""

import pytest

from core.errors import FleetError
from fleet.query.jobs import (
    JobFilter,
    glob_match,
    headline_metrics,
    human_duration,
    human_hours,
    human_span,
    name_matches,
    parse_states,
    times,
    view,
)
from state.jobrecord import JobRecord, JobState, RunEnd

NOW = 1_000_000.0


@pytest.mark.parametrize(
    "seconds, text",
    [
        (None, ""),
        (-3, "0s"),
        (0, "0s"),
        (59.9, "59s"),
        (60, "1m00s"),
        (245, "4m05s"),
        (3599, "59m59s"),
        (3600, "1h00m"),
        (7620, "2h07m"),
        (86399, "23h59m"),
        (86400, "1d00h"),
        (273600, "3d04h"),
    ],
)
def test_durations_read_as_two_units_at_most(seconds, text):
    assert human_duration(seconds) == text


TRACEBACK = """job boom (a57d81e4dcb4) exited with status 1; last output:
step 2
Traceback (most recent call last):
  File "<string>", line 4, in <module>
ValueError: learning_rate must be positive, got -1
"""


@pytest.mark.parametrize(
    "fields, line",
    [
        ({}, ""),
        (
            {
                "end": RunEnd.FAILED,
                "end_reason": "exit 1: ValueError: bad",
                "last_error": TRACEBACK,
            },
            "exit 1: ValueError: bad",
        ),
        (
            {"last_error": "lease expired on host-a (attempt 1)\nmore"},
            "lease expired on host-a (attempt 1)",
        ),
        ({"last_error": "\n  \nfirst words\n"}, "first words"),  # a record older than end fields
    ],
)
def test_a_rows_reason_is_its_end_reason_else_its_errors_first_line(fields, line):
    assert JobRecord("j", "j", JobState.FAILED, **fields).reason == line


@pytest.mark.parametrize(
    "name, pattern, matches",
    [
        ("gbt-wine", "gbt-wine", True),
        ("gbt-wine[seed=1]", "gbt-wine", True),  # a sweep's base name
        ("gbt-wine[seed=1,max_depth=4]", "gbt-wine", True),
        ("gbt-wine2", "gbt-wine", False),  # a longer name is another job
        ("gbt-wine-big[seed=1]", "gbt-wine", False),
        ("gbt-wine[seed=1]", "gbt-wine[seed=1]", True),  # brackets are literal
        ("gbt-wine[seed=1]", "gbt-wine[seed=*]", True),
        ("gbt-wine[seed=2]", "gbt-wine[seed=1]", False),
        ("gbt-wine[seed=1]", "*seed=1*", True),
        ("mlp-wine", "gbt-*", False),
        ("gbt-x", "gbt-?", True),
        ("gbt-xy", "gbt-?", False),
        ("a.b", "a?b", True),
        ("axb", "a.b", False),  # regex characters are literal too
    ],
)
def test_names_match_exactly_by_sweep_base_or_by_glob(name, pattern, matches):
    assert name_matches(name, pattern) is matches


def test_host_globs_match_the_whole_hostname():
    assert (
        glob_match("gpu-07", "gpu-*")
        and not glob_match("big-gpu-07", "gpu-*")
        and glob_match("", "*")
    )


def test_states_parse_from_repeated_or_comma_separated_flags():
    assert parse_states(["running,failed", "QUEUED"]) == {
        JobState.RUNNING,
        JobState.FAILED,
        JobState.QUEUED,
    }
    assert parse_states([]) == frozenset()


def test_a_bad_state_is_an_error_naming_it_and_the_choices():
    with pytest.raises(
        FleetError, match=r"--state 'runing': not a job state; choose from queued, running"
    ):
        parse_states(["runing"])


def row(name, state, **kw) -> JobRecord:
    return JobRecord(job_id=name + "-id", name=name, state=JobState(state), **kw)


ROWS = [
    row("done-old", "succeeded", started_at=NOW - 500, finished_at=NOW - 400),
    row("done-new", "succeeded", started_at=NOW - 50, finished_at=NOW - 10),
    row("wait-new", "queued", created_at=NOW - 5),
    row("wait-old", "queued", created_at=NOW - 900),
    row(
        "fail",
        "failed",
        started_at=NOW - 100,
        finished_at=NOW - 90,
        last_error=TRACEBACK,
        worker="cpu-1",
        end=RunEnd.FAILED,
        end_reason="exit 1: ValueError: learning_rate must be positive, got -1",
    ),
    row("run-short", "running", started_at=NOW - 3, worker="gpu-1"),
    row("run-long", "running", started_at=NOW - 3000, worker="gpu-2"),
    row("gone", "cancelled", finished_at=NOW - 1),
]


def test_a_view_puts_running_first_then_failed_queued_cancelled_succeeded():
    names = [r.name for r in view(ROWS, limit=None, now=NOW).rows]
    assert names == [
        "run-long",
        "run-short",
        "fail",
        "wait-old",
        "wait-new",
        "gone",
        "done-new",
        "done-old",
    ]


def test_a_capped_view_keeps_the_most_interesting_rows_and_counts_every_match():
    v = view(ROWS, limit=3, now=NOW)
    assert [r.name for r in v.rows] == ["run-long", "run-short", "fail"]
    assert v.hidden == 5 and v.matched == v.total == 8
    assert v.counts == {
        "running": 2,
        "failed": 1,
        "queued": 2,
        "cancelled": 1,
        "succeeded": 2,
        "pruned": 0,
        "waiting": 0,
    }
    assert v.summary() == "8 jobs: 2 running, 1 failed, 2 queued, 1 cancelled, 2 succeeded"


def test_filters_combine_state_name_and_host_and_the_summary_says_so():
    v = view(ROWS, JobFilter(frozenset({JobState.RUNNING}), host="gpu-*"), now=NOW)
    assert [r.name for r in v.rows] == ["run-long", "run-short"]
    assert v.summary() == "2 of 8 jobs match state in {running}, host ~ gpu-*: 2 running"
    assert [r.name for r in view(ROWS, JobFilter(name="wait-*"), now=NOW).rows] == [
        "wait-old",
        "wait-new",
    ]


def test_a_summary_says_how_many_trials_are_folded_into_search_lines_even_when_all_are():
    trials = [
        row("tune[trial=0]", "running", search="s1"),
        row("tune[trial=1]", "queued", search="s1"),
        row("tune[trial=2]", "pruned", search="s1"),
    ]
    folded = JobFilter(folded=frozenset({"s1"}))
    assert view(trials, folded, now=NOW).summary() == "3 jobs: 3 trials in search lines below"
    assert view(ROWS + trials, folded, now=NOW).summary() == (
        "11 jobs: 2 running, 1 failed, 2 queued, 1 cancelled, 2 succeeded, "
        "3 trials in search lines below"
    )
    running = JobFilter(frozenset({JobState.RUNNING}), folded=frozenset({"s1"}))
    assert view(ROWS + trials, running, now=NOW).summary() == (
        "3 of 11 jobs match state in {running}: 2 running, 1 trial in search lines below"
    )
    assert view(trials, folded, now=NOW).to_dict()["folded"] == 3
    other = row("tune[trial=0]", "succeeded", search="s0")  # same name, another search's trial
    assert view([*trials, other], folded, now=NOW).rows == [other]


@pytest.mark.parametrize(
    "r, expected",
    [
        (
            row("q", "queued", created_at=NOW - 90),
            {"queued_for_s": 90, "ran_for_s": None, "finished_ago_s": None},
        ),
        (
            # requeued
            row("q", "queued", created_at=NOW - 90, queued_at=NOW - 30, started_at=NOW - 60),
            {"queued_for_s": 30, "ran_for_s": None, "finished_ago_s": None},
        ),
        (
            row("r", "running", started_at=NOW - 42),
            {"queued_for_s": None, "ran_for_s": 42, "finished_ago_s": None},
        ),
        (
            row("s", "succeeded", started_at=NOW - 100, finished_at=NOW - 40),
            {"queued_for_s": None, "ran_for_s": 60, "finished_ago_s": 40},
        ),
        (
            row("c", "cancelled", finished_at=NOW - 5),
            {"queued_for_s": None, "ran_for_s": None, "finished_ago_s": 5},
        ),
    ],
)
def test_times_say_how_long_a_job_waited_ran_and_how_long_ago_it_ended(r, expected):
    assert times(r, NOW) == expected


def test_json_rows_carry_iso_times_seconds_and_the_error_line():
    d = view(ROWS, JobFilter(name="fail"), now=NOW).to_dict()
    [job] = d["jobs"]
    assert job["state"] == "failed" and job["ran_for_s"] == 10 and job["finished_ago_s"] == 90
    assert job["started_at"].endswith("+00:00") and job["error_line"].startswith(
        "exit 1: ValueError"
    )
    assert d["counts"]["failed"] == 1 and d["matched"] == 1 and d["total"] == 8


def test_headline_metrics_prefer_measured_values_to_counters():
    got = headline_metrics(
        {"epoch": 30, "epochs": 30, "metric": "logloss", "train_loss": 0.1, "valid_loss": 0.2}
    )
    assert list(got) == ["train_loss", "valid_loss", "epoch"]


def test_show_prints_iso_times_and_no_kept_folder_once_the_bundle_is_uploaded():
    from fleet.query.jobs import record_view

    d = record_view(
        {
            "state": "succeeded",
            "created_at": 0.0,
            "finished_at": 60.5,
            "artifact": {"sha256": "ab"},
            "trained": {"at": 30.0, "host": "h", "dir": "/work/kept/x"},
            "name": "x",
        }
    )
    assert (
        d["created_at"] == "1970-01-01T00:00:00.000+00:00"
        and d["finished_at"] == "1970-01-01T00:01:00.500+00:00"  # to the millisecond
    )
    assert d["trained"] == {"at": "1970-01-01T00:00:30.000+00:00", "host": "h", "dir": None}
    running = record_view(
        {"state": "running", "started_at": None, "trained": {"at": 1.0, "host": "h", "dir": "/k"}}
    )
    assert running["trained"]["dir"] == "/k" and running["started_at"] is None


@pytest.mark.parametrize(
    "seconds, text",
    [
        (7 * 86400, "7 d"),
        (12 * 3600, "12 h"),
        (1800, "30 min"),
        (90, "1m30s"),
        (86400 + 3600, "25 h"),
        (86400 + 60, "1d00h"),
    ],
)
def test_a_window_or_half_life_reads_as_people_say_it(seconds, text):
    assert human_span(seconds) == text


@pytest.mark.parametrize(
    "hours, text",
    [(0, "0"), (30 / 3600, "0.008"), (0.5, "0.50"), (41.04, "41.0"), (12345.6, "12,345.6")],
)
def test_hours_keep_the_digits_that_matter_so_a_short_job_is_not_zero(hours, text):
    assert human_hours(hours) == text


def test_show_gives_who_preempted_whom_with_iso_times_like_every_other_time():
    from fleet.query.jobs import record_view

    d = record_view(
        {
            "preempted_by": {"name": "urgent", "priority": 9, "at": 60.0},
            "preempted": [{"name": "six-hours", "at": 0.0}],
        }
    )
    assert d["preempted_by"] == {
        "name": "urgent",
        "priority": 9,
        "at": "1970-01-01T00:01:00.000+00:00",
    }
    assert d["preempted"] == [{"name": "six-hours", "at": "1970-01-01T00:00:00.000+00:00"}]
