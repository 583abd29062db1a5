"""One parser for a FLEET_METRIC line (trainers.protocol): what each kind of line does, the
one step rule, and the point it makes for the history and the pruner alike."""

import math

import pytest

from core import constants as C
from tasks.runner import Progress
from trainers import protocol as P

NESTED = "[" * 5000 + "]" * 5000


@pytest.mark.parametrize(
    "line, report, error",
    [
        ('FLEET_METRIC {"epoch": 1, "loss": 0.5}', {"epoch": 1, "loss": 0.5}, None),
        ("loss is 0.5", None, None),  # not a metric line at all
        ("FLEET_METRIC {not json", None, P.LineError.NOT_JSON),
        ("FLEET_METRIC [1, 2, 3]", None, P.LineError.NOT_OBJECT),
        ('FLEET_METRIC "text"', None, P.LineError.NOT_OBJECT),
        ("FLEET_METRIC " + NESTED, None, P.LineError.TOO_DEEP),
        ('FLEET_METRIC {"a": ' + NESTED + "}", None, P.LineError.TOO_DEEP),
        ("FLEET_METRIC " + "1" * 5000, None, P.LineError.NOT_JSON),  # more digits than int()
        ('FLEET_METRIC {"x": "' + "a" * 70_000 + '"}', None, P.LineError.TOO_LONG),
        ("FLEET_METRIC \x00\xff\ufffd", None, P.LineError.NOT_JSON),
        # a progress bar left open prints its last state before the line
        (' 45%|####5 | 45/100 [00:01<00:01]FLEET_METRIC {"loss": 1}', {"loss": 1}, None),
        ("10%|#FLEET_METRIC {cut by a redraw", None, P.LineError.NOT_JSON),
        ("FLEET_METRIC_NOT {}", None, None),
        # a step outside 0..2^53 is no step any reader can keep
        ('FLEET_METRIC {"step": 1e20, "loss": 1}', None, P.LineError.BAD_STEP),
        ('FLEET_METRIC {"step": 9007199254740993, "loss": 1}', None, P.LineError.BAD_STEP),
        ('FLEET_METRIC {"epoch": -1, "loss": 1}', None, P.LineError.BAD_STEP),
        ('FLEET_METRIC {"round": Infinity, "loss": 1}', None, P.LineError.BAD_STEP),
        ('FLEET_METRIC {"step": 9007199254740992, "loss": 1}', {"step": 2**53, "loss": 1}, None),
        ('FLEET_METRIC {"step": "1e20", "epoch": 3}', {"step": "1e20", "epoch": 3}, None),
    ],
)
def test_each_kind_of_line_is_a_report_an_error_or_not_a_metric_line_and_never_raises(
    line, report, error
):
    got = P.read_metric_line(line)
    if report is None and error is None:
        assert got is None
    else:
        assert got.report == report and got.error == error
    assert P.parse_metric_line(line) == report


def test_nan_and_infinities_are_read_and_kept_as_text_in_the_point():
    got = P.read_metric_line('FLEET_METRIC {"epoch": 2, "loss": NaN, "a": Infinity, "b": -1e999}')
    assert math.isnan(got.report["loss"])
    p = P.point_of(got.report, 1)
    assert p.values == {"epoch": 2, "loss": "nan", "a": "inf", "b": "-inf"}
    assert math.isnan(p.value("loss")) and p.value("a") == math.inf and p.value("c") is None


@pytest.mark.parametrize(
    "report, count, step",
    [
        ({"step": 7, "epoch": 3, "loss": 1}, 9, 7),  # step first
        ({"epoch": 3, "loss": 1}, 9, 3),  # then epoch
        ({"round": 20, "rounds": 100, "loss": 1}, 9, 20),  # then round (the gbt trainer)
        ({"loss": 1}, 9, 9),  # else the line's 1-based number in its run
        ({"epoch": True, "loss": 1}, 2, 2),  # a bool is no step
        ({"epoch": 1.75, "loss": 1}, 5, 1),  # a fraction is rounded down
        ({"step": float("nan"), "epoch": 4, "loss": 1}, 5, 4),  # a non-finite step is skipped
        ({"step": "3", "loss": 1}, 5, 5),  # text is no step
    ],
)
def test_a_lines_step_is_its_step_else_epoch_else_round_else_its_number(report, count, step):
    assert P.step_of(report, count) == step
    assert P.point_of(report, count).step == step


def test_a_point_keeps_numbers_only_and_a_line_without_one_makes_none():
    p = P.point_of({"epoch": 1, "metric": "logloss", "done": True, "valid_loss": 0.5}, 1)
    assert p.values == {"epoch": 1, "valid_loss": 0.5}
    assert P.point_of({"phase": "warmup"}, 1) is None
    assert P.point_of({"big": 10**400}, 1).values == {"big": "inf"}


def test_a_report_is_clipped_to_the_records_bounds_and_says_so():
    many = {f"k{i}": i for i in range(P.MAX_METRIC_KEYS + 5)}
    clipped, cut = P.clip_report(many)
    assert len(clipped) == P.MAX_METRIC_KEYS and cut
    clipped, cut = P.clip_report({"k" * 500: 1, "text": "x" * 5000, "list": [1, 2]})
    assert cut and all(len(k) < 150 for k in clipped)
    assert len(clipped["text"]) < 300 and clipped["list"] == "[1, 2]"
    assert P.clip_report({"loss": 0.5}) == ({"loss": 0.5}, False)
    assert P.clip_metrics({"text": "x" * 5000})[P.CUT_KEY] is True


def test_the_reader_counts_bad_lines_quotes_the_first_and_numbers_only_good_ones():
    from collections import deque

    progress = Progress(started=0.0, tail=deque(), metrics={})
    lines = [
        'FLEET_METRIC {"loss": 3}',
        "FLEET_METRIC " + NESTED,
        "FLEET_METRIC [1]",
        'FLEET_METRIC {"loss": 2}',
        'FLEET_METRIC {"step": 1e20, "loss": 1}',
    ]
    points = [progress.read(line) for line in lines]
    assert [p and p.step for p in points] == [1, None, None, 2, None]
    assert progress.bad["count"] == 3 and progress.bad["first"].startswith("JSON nested too")
    assert progress.snapshot()["bad_metric_lines"]["count"] == 3
    assert progress.metrics == {"loss": 2}


def test_a_job_printing_ever_new_keys_keeps_a_bounded_metrics_dict():
    from collections import deque

    progress = Progress(started=0.0, tail=deque(), metrics={})
    for i in range(3 * P.MAX_METRIC_KEYS):
        progress.read(f'FLEET_METRIC {{"k{i}": {i}, "k0": {i}}}')
    assert len(progress.metrics) <= P.MAX_METRIC_KEYS + 1
    assert progress.metrics["k0"] == 3 * P.MAX_METRIC_KEYS - 1 and progress.metrics[P.CUT_KEY]
    assert C.METRIC_STEP_KEYS == ("step", "epoch", "round")
