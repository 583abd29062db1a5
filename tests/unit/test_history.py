"""A metric line becomes a history point (its numeric values and its step), and a history
is folded by step so that a resumed run's replayed steps count once, with the later values."""

from state import history
from trainers.protocol import point_of


def mk(report: dict, *, t: float, run: int, ordinal: int) -> dict:
    """A stored point made as the runner makes it (trainers.protocol.point_of)."""
    p = point_of(report, ordinal)
    return history.point(p.step, p.values, t=t, run=run)


def test_folding_by_step_keeps_the_resumed_runs_values_for_the_steps_it_replayed():
    first = [mk({"epoch": e, "loss": 10.0 - e}, t=e, run=1, ordinal=e) for e in (1, 2, 3, 4)]
    # checkpointed after epoch 2: the second run replays 3 and 4 (different values), then 5
    second = [mk({"epoch": e, "loss": 20.0 - e}, t=10 + e, run=2, ordinal=e) for e in (3, 4, 5)]
    folded = history.by_step(first + second)
    assert [p["step"] for p in folded] == [1, 2, 3, 4, 5]
    assert [p["loss"] for p in folded] == [9.0, 8.0, 17.0, 16.0, 15.0]
    assert [p["run"] for p in folded] == [1, 1, 2, 2, 2]


def test_a_marker_line_merges_into_its_step_without_losing_the_steps_values():
    points = [
        {"step": 1, "t": 1, "run": 1, "loss": 3.0},
        {"step": 1, "t": 2, "run": 2, "resumed_from_epoch": 4},
    ]
    assert history.by_step(points) == [
        {"step": 1, "t": 2, "run": 2, "loss": 3.0, "resumed_from_epoch": 4}
    ]


def test_values_are_one_metrics_finite_points_by_step():
    points = [
        {"step": 1, "loss": 2.0},
        {"step": 2, "loss": float("nan")},
        {"step": 3, "acc": 0.5},
        {"step": 4, "loss": 1.0},
    ]
    assert history.values(points, "loss") == [(1, 2.0), (4, 1.0)]


def test_decoding_skips_unreadable_entries_and_folds():
    raw = ['{"step": 2, "loss": 1.0}', "not json", "[1]", b'{"step": 1, "loss": 2.0}']
    assert history.decode(raw) == [{"step": 1, "loss": 2.0}, {"step": 2, "loss": 1.0}]


def test_jsonl_is_one_compact_point_a_line():
    assert (
        history.jsonl([{"step": 1, "loss": 2.0}, {"step": 2}])
        == b'{"step":1,"loss":2.0}\n{"step":2}\n'
    )
