"""`fleet plot`'s data: every trial's curve (pruned ones dimmed, the best highlighted), the best
value so far by trial number, each parameter against the final metric; and a real PNG."""

import pytest

from fleet.query import plotdata
from fleet.query import results as R
from tests.harness.records import job_record

MIN = R.Direction.MINIMIZE


def hist(*values):
    return [{"step": i + 1, "t": float(i), "run": 1, "loss": v} for i, v in enumerate(values)]


def leaderboard():
    records = [
        {
            "job_id": "a" * 64,
            "name": "s[trial=0]",
            "state": "succeeded",
            "trial": "0",
            "created_at": "1",
            "params": {"lr": 0.1, "opt": "adam"},
            "search": "s",
        },
        {
            "job_id": "b" * 64,
            "name": "s[trial=1]",
            "state": "pruned",
            "trial": "1",
            "created_at": "2",
            "params": {"lr": 0.5, "opt": "sgd"},
            "search": "s",
        },
        {
            "job_id": "c" * 64,
            "name": "s[trial=2]",
            "state": "succeeded",
            "trial": "2",
            "created_at": "3",
            "params": {"lr": 0.01, "opt": "adam"},
            "search": "s",
        },
        {
            "job_id": "d" * 64,
            "name": "s[trial=3]",
            "state": "succeeded",
            "trial": "3",
            "created_at": "4",
            "params": {"lr": 0.2, "opt": "sgd"},
            "search": "s",
        },
        {
            "job_id": "e" * 64,
            "name": "s[trial=4]",
            "state": "queued",
            "trial": "4",
            "created_at": "5",
            "params": {"lr": 0.3, "opt": "adam"},
            "search": "s",
        },
    ]
    histories = {
        "a" * 64: hist(1.0, 0.6, 0.5),
        "b" * 64: hist(2.0),
        "c" * 64: hist(0.9, 0.3, 0.2),
        "d" * 64: hist(0.8, 0.7, 0.4),
    }
    return R.build(
        "s", [job_record(**r) for r in records], histories, metric="loss", direction="minimize"
    )


def test_each_trial_has_its_curve_the_best_highlighted_and_the_pruned_dimmed():
    data = plotdata.prepare(leaderboard())
    curves = {c.trial: c for c in data.curves}
    assert curves[2].steps == [1, 2, 3] and curves[2].values == [0.9, 0.3, 0.2]
    assert [c.trial for c in data.curves if c.best] == [2]
    assert [c.trial for c in data.curves if c.dimmed] == [1]
    assert curves[4].steps == []  # queued: nothing to draw yet


def test_best_so_far_follows_the_succeeded_trials_in_trial_order_and_carries_on_past_the_others():
    data = plotdata.prepare(leaderboard())
    assert data.finals == [
        (0, 0.5, "succeeded"),
        (1, 2.0, "pruned"),
        (2, 0.2, "succeeded"),
        (3, 0.4, "succeeded"),
    ]
    assert data.best_so_far == [(0, 0.5), (1, 0.5), (2, 0.2), (3, 0.2)]


@pytest.mark.parametrize(
    "direction, expected",
    [
        (R.Direction.MINIMIZE, [(0, 3.0), (1, 2.0), (2, 2.0), (3, 2.0)]),
        (R.Direction.MAXIMIZE, [(0, 3.0), (1, 3.0), (2, 4.0), (3, 4.0)]),
    ],
)
def test_best_so_far_takes_the_direction(direction, expected):
    finals = [
        (0, 3.0, "succeeded"),
        (1, 2.0, "succeeded"),
        (2, 4.0, "succeeded"),
        (3, 0.1, "failed"),
    ]
    assert plotdata.best_so_far(finals, direction) == expected


def test_each_parameter_is_paired_with_the_final_metric_numeric_or_by_category():
    data = plotdata.prepare(leaderboard())
    by_name = {p.name: p for p in data.params}
    lr, opt = by_name["lr"], by_name["opt"]
    assert lr.numeric and lr.trials == [0, 1, 2, 3] and lr.values == [0.1, 0.5, 0.01, 0.2]
    assert lr.metric == [0.5, 2.0, 0.2, 0.4]
    assert not opt.numeric and opt.values == ["adam", "sgd", "adam", "sgd"]


def test_list_valued_params_are_categories_labelled_as_json():
    board = R.Leaderboard(
        "s",
        "search",
        R.Objective("loss", MIN),
        [
            R.Trial(0, "a", "a", "succeeded", {"h": [64]}, 1.0, 1.0, 1, "h"),
            R.Trial(1, "b", "b", "succeeded", {"h": [128, 64]}, 2.0, 2.0, 1, "h"),
        ],
    )
    (h,) = plotdata.param_series(board)
    assert not h.numeric and h.values == ["[64]", "[128,64]"]


def test_the_picture_is_written_as_a_real_png(tmp_path):
    pytest.importorskip("matplotlib")
    from fleet import plot

    path = plot.save(plotdata.prepare(leaderboard()), tmp_path / "s.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 10_000


def test_an_unknown_picture_format_is_refused_with_the_choices(tmp_path):
    from core.errors import FleetError
    from fleet import plot

    with pytest.raises(FleetError, match=r"\.png, \.svg, \.pdf"):
        plot.save(plotdata.prepare(leaderboard()), tmp_path / "s.gif")


def test_parameter_panels_dim_the_trials_that_stopped_short_and_mark_the_best():
    board = leaderboard()
    lr = next(p for p in plotdata.prepare(board).params if p.name == "lr")
    assert lr.trials == [0, 1, 2, 3]
    assert lr.dimmed == [False, True, False, False]  # trial 1 was pruned
    assert lr.best == [t.best for t in sorted(board.trials, key=lambda t: t.trial)][:4]
    assert lr.best == [False, False, True, False]


def test_categories_come_in_the_order_the_space_declares_then_as_seen():
    space = {"opt": {"choices": ["sgd", "rmsprop", "adam"]}}
    opt = next(p for p in plotdata.prepare(leaderboard(), space).params if p.name == "opt")
    assert opt.categories == ["sgd", "adam"]  # declared order; rmsprop has no trial: no slot
    opt = next(p for p in plotdata.prepare(leaderboard()).params if p.name == "opt")
    assert opt.categories == ["adam", "sgd"]  # no space: as first seen


def test_a_parameter_no_finished_trial_has_gets_no_panel():
    board = leaderboard()
    trials = [
        t if t.value is None else R.Trial(**{**t.to_dict(), "params": {}}) for t in board.trials
    ]
    assert plotdata.param_series(R.Leaderboard("s", "search", board.objective, trials)) == []


@pytest.mark.parametrize(
    "values, log",
    [([0.001, 0.5], True), ([0.01, 0.99], False), ([-1.0, 100.0], False), ([], False)],
)
def test_the_metric_axis_is_logarithmic_when_values_span_two_decades(values, log):
    assert plotdata.spans_decades(values) is log


def test_the_picture_of_a_search_with_pruned_trials_and_a_log_axis_is_drawn(tmp_path):
    pytest.importorskip("matplotlib")
    from fleet import plot

    board = leaderboard()
    histories = {**board.histories, "a" * 64: hist(100.0, 1.0, 0.05)}
    board = R.Leaderboard(board.name, board.kind, board.objective, board.trials, histories)
    data = plotdata.prepare(board, {"opt": {"choices": ["sgd", "adam"]}})
    assert data.log_y
    fig = plot.figure(data)
    axes = fig.get_axes()
    assert len(axes) == 1 + 1 + len(data.params)  # curves, best so far, one per parameter
    assert all(ax.get_yscale() == "log" for ax in axes)
    opt = axes[-1]
    assert [t.get_text() for t in opt.get_xticklabels()] == ["sgd", "adam"]
    plot.save(data, tmp_path / "s.png")


def test_the_curves_title_counts_only_the_faint_curves_drawn_by_their_end():
    curve = plotdata.Curve
    curves = [
        curve(0, "t0", "succeeded", [1, 2], [1.0, 0.5]),
        curve(1, "t1", "pruned", [1], [2.0], dimmed=True),
        curve(2, "t2", "failed", [], [], dimmed=True),  # failed before its first step: no curve
        curve(3, "t3", "failed", [1, 2], [3.0, 2.0], dimmed=True),
    ]
    assert plotdata.curves_title(curves) == "learning curves (1 failed, 1 pruned: faint)"
    assert plotdata.curves_title(curves[:1] + curves[2:3]) == "learning curves"


def test_steps_and_trial_numbers_are_ticked_as_whole_numbers():
    pytest.importorskip("matplotlib")
    from fleet import plot

    data = plotdata.prepare(leaderboard())
    curves, best = plot.figure(data).get_axes()[:2]
    assert curves.get_title() == plotdata.curves_title(data.curves)
    for ax in (curves, best):
        assert all(float(t).is_integer() for t in ax.get_xticks())
