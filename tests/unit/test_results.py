"""`fleet results`: which metric ranks, the order (best first, missing last, ties), the params
that tell a sweep's points apart, and a table that fits 80 columns; JSON and CSV shapes."""

import csv
import io
import json

import pytest
from rich.console import Console

from fleet.cli import results as cli
from fleet.query import results as R
from tests.harness.records import job_record

MIN, MAX = R.Direction.MINIMIZE, R.Direction.MAXIMIZE


def row(trial, value, state="succeeded", best_value=None, **kw):
    return R.Trial(
        trial=trial,
        name=f"tune[trial={trial}]",
        job_id=f"{trial:064x}",
        state=state,
        params={},
        value=value,
        best_value=value if best_value is None else best_value,
        steps=3,
        host="h",
        **kw,
    )


@pytest.mark.parametrize("direction, order", [(MIN, [2, 0, 1]), (MAX, [1, 0, 2])])
def test_succeeded_trials_rank_by_value_in_the_metrics_direction(direction, order):
    ranked = R.rank([row(0, 0.5), row(1, 0.9), row(2, 0.1)], direction)
    assert [t.trial for t in ranked] == order
    assert [t.best for t in ranked] == [True, False, False]


def test_trials_without_a_value_come_last_and_unfinished_ones_after_succeeded():
    ranked = R.rank(
        [
            row(0, None, "queued"),
            row(1, 0.05, "pruned"),
            row(2, 0.3),
            row(3, 0.01, "running"),
            row(4, None, "failed"),
            row(5, 0.2),
        ],
        MIN,
    )
    assert [t.trial for t in ranked] == [5, 2, 3, 1, 0, 4]
    assert ranked[0].best and not any(t.best for t in ranked[1:])


def test_ties_go_to_the_better_best_value_then_the_earlier_trial():
    ranked = R.rank(
        [row(3, 0.5, best_value=0.4), row(1, 0.5, best_value=0.4), row(2, 0.5, best_value=0.3)], MIN
    )
    assert [t.trial for t in ranked] == [2, 1, 3]


def test_no_trial_is_marked_best_when_none_has_a_value():
    assert not any(t.best for t in R.rank([row(0, None, "queued"), row(1, None, "running")], MIN))


@pytest.mark.parametrize(
    "kwargs, points, expected",
    [
        ({"metric": "acc"}, [], ("acc", MAX, "given", "guessed")),
        ({"metric": "acc", "direction": "minimize"}, [], ("acc", MIN, "given", "given")),
        (
            {"search": {"metric": "f1", "direction": "minimize"}},
            [],
            ("f1", MIN, "search", "search"),
        ),
        (
            {},
            [{"step": 1, "epoch": 1, "epochs": 9, "train_loss": 1.0, "valid_loss": 2.0}],
            ("valid_loss", MIN, "trainer's", "guessed"),
        ),
        (
            {},
            [{"step": 1, "t": 5.0, "run": 1, "reward": 1.0, "loss": 2.0}],
            ("reward", MAX, "first reported", "guessed"),
        ),
        ({}, [], ("valid_loss", MIN, "none reported yet", "guessed")),
    ],
)
def test_the_metric_is_given_else_the_searchs_else_the_trainers_else_the_first_reported(
    kwargs, points, expected
):
    o = R.objective(points, **kwargs)
    assert (o.metric, o.direction, o.source, o.direction_source) == expected


def test_a_bad_direction_names_the_choices():
    with pytest.raises(Exception, match="minimize or maximize"):
        R.objective([], metric="x", direction="down")


def test_a_sweeps_params_are_the_values_that_differ_between_its_points():
    specs = [
        {"hyper": {"epochs": 5, "lr": 0.1}, "seed": 0},
        {"hyper": {"epochs": 5, "lr": 0.01}, "seed": 0},
        {"hyper": {"epochs": 5, "lr": 0.1}, "seed": 1},
    ]
    assert R.varied_params(specs) == [
        {"lr": 0.1, "seed": 0},
        {"lr": 0.01, "seed": 0},
        {"lr": 0.1, "seed": 1},
    ]


def record(n, *, created, hyper, state="succeeded", **kw):
    return job_record(
        job_id=f"{n:064x}",
        name=f"g[lr={hyper['lr']}]",
        state=state,
        worker="w1",
        created_at=created,
        spec={"hyper": hyper, "seed": 0},
        core_s=12.5,
        **kw,
    )


def test_build_takes_the_records_trial_and_params_when_a_search_wrote_them():
    recs = [
        record(1, created=2, hyper={"lr": 0.1}, trial="7", params={"lr": 0.1}, search="s1"),
        record(2, created=1, hyper={"lr": 0.2}),
    ]
    board = R.build("g", recs, {})
    by_id = {t.job_id: t for t in board.trials}
    assert board.kind == "search"
    assert by_id[f"{1:064x}"].trial == 7 and by_id[f"{1:064x}"].params == {"lr": 0.1}
    # publish order
    assert by_id[f"{2:064x}"].trial == 0 and by_id[f"{2:064x}"].params == {"lr": 0.2}


def test_build_takes_final_and_best_values_and_steps_from_the_history():
    recs = [record(1, created=1, hyper={"lr": 0.1}), record(2, created=2, hyper={"lr": 0.2})]
    hist = {
        f"{1:064x}": [
            {"step": 1, "valid_loss": 0.9},
            {"step": 2, "valid_loss": 0.5},
            {"step": 3, "valid_loss": 0.6},
        ],
        f"{2:064x}": [{"step": 1, "valid_loss": 0.8}, {"step": 2, "valid_loss": 0.4}],
    }
    board = R.build("g", recs, hist)
    first = board.trials[0]
    assert (first.trial, first.value, first.best_value, first.steps, first.best) == (
        1,
        0.4,
        0.4,
        2,
        True,
    )
    second = board.trials[1]
    assert (second.value, second.best_value, second.steps, second.core_s) == (0.6, 0.5, 3, 12.5)
    assert board.kind == "sweep" and second.label == "lr=0.1"


def test_a_job_with_no_history_ranks_by_the_final_metric_in_its_record():
    recs = [record(1, created=1, hyper={"lr": 0.1}, result={"metrics": {"valid_loss": 0.3}})]
    t = R.build("g", recs, {}).trials[0]
    assert (t.value, t.best_value, t.steps) == (0.3, 0.3, 0)


# --- rendering ------------------------------------------------------------------------
LONG = {
    "learning_rate": 0.000123456,
    "batch_size": 224,
    "hidden_sizes": [256, 128, 64],
    "optimizer": "adamw",
    "weight_decay": 0.0001,
}


def board(n=12):
    trials = [
        R.Trial(
            trial=i,
            name=f"tune-mlp[trial={i}]",
            job_id=f"{i:064x}",
            state=["succeeded", "pruned", "running", "failed"][i % 4],
            params=dict(LONG, seed=i),
            value=None if i % 4 == 3 else 0.1 + i / 1000,
            best_value=0.09 + i / 1000,
            steps=40,
            host="worker-host-with-a-long-name",
            gpu_s=3600.0 * (i % 2),
            core_s=120.0,
        )
        for i in range(n)
    ]
    return R.Leaderboard(
        "tune-mlp",
        "search",
        R.Objective("valid_loss", MIN, "search", "search"),
        R.rank(trials, MIN),
    )


def text_at(width, wide=False):
    console = Console(width=width, record=True, file=io.StringIO(), color_system=None)
    console.print(cli.render(board(), width=width, wide=wide))
    return console.export_text()


@pytest.mark.parametrize("width", [80, 100, 160])
def test_the_leaderboard_fits_the_terminal_and_shows_every_trial_and_its_params(width):
    text = text_at(width)
    assert max(len(line) for line in text.splitlines()) <= width
    flat = " ".join(text.split())  # long params wrap onto more lines
    for t in board().trials:
        assert cli.compact(t.params) in flat
    assert "valid_loss (minimize; search)" in flat


def test_at_80_columns_params_go_on_their_own_lines_under_the_table():
    lines = text_at(80).splitlines()
    at = [ln.strip() for ln in lines].index("params:")
    assert lines[at + 1].split()[0] == f"{board().best.trial}*"


def test_the_best_is_first_and_marked():
    lines = [ln for ln in text_at(160).splitlines() if ln.strip()]
    header = next(i for i, ln in enumerate(lines) if ln.lstrip().startswith("trial"))
    assert lines[header + 2].split()[0] == "0*"  # after the header's rule


@pytest.mark.parametrize(
    "params, text",
    [
        (
            {"lr": 0.000123456, "h": [128, 64], "opt": "adam", "bs": 64},
            "lr=0.0001235 h=[128,64] opt=adam bs=64",
        ),
        ({}, ""),
    ],
)
def test_params_in_compact_form(params, text):
    assert cli.compact(params) == text


@pytest.mark.parametrize(
    "gpu_s, core_s, text", [(0, 41.4, "41 core-s"), (12_345, 99, "12.3k GPU-s"), (0, 0, "")]
)
def test_usage_is_gpu_seconds_when_it_held_gpus_else_core_seconds(gpu_s, core_s, text):
    assert (
        cli.usage(
            R.Trial(0, "n", "j", "succeeded", {}, 1.0, 1.0, 1, "h", gpu_s=gpu_s, core_s=core_s)
        )
        == text
    )


def test_json_is_a_list_of_trials_with_the_promised_keys():
    items = json.loads(json.dumps(board().to_list()))
    assert isinstance(items, list) and len(items) == 12
    for key in (
        "trial",
        "name",
        "job_id",
        "state",
        "params",
        "value",
        "best_value",
        "steps",
        "host",
    ):
        assert key in items[0]
    assert items[0]["best"] is True and items[0]["metric"] == "valid_loss"


def test_csv_has_a_header_and_one_row_per_trial_best_first():
    out = io.StringIO()
    cli.write_csv(board(), out)
    rows = list(csv.DictReader(io.StringIO(out.getvalue())))
    assert len(rows) == 12 and list(rows[0]) == list(cli.CSV_COLUMNS)
    assert rows[0]["trial"] == "0" and json.loads(rows[0]["params"])["batch_size"] == 224
    assert rows[-1]["value"] == ""  # a failed trial without a value comes last, empty


def test_json_and_csv_carry_the_states_and_direction_as_their_string_values():
    """The code compares states and directions as enums; what users read stays the strings."""
    records = [
        job_record(job_id=f"j{n}", name=f"t[trial={n}]", state=s, search="s1", trial=n)
        for n, s in enumerate(["succeeded", "pruned", "queued"])
    ]
    histories = {"j0": [{"step": 1, "f1": 0.5}], "j1": [{"step": 1, "f1": 0.9}]}
    built = R.build("t", records, histories, search={"metric": "f1", "direction": MAX})
    text = json.dumps(built.to_list())
    assert "JobState" not in text and "Direction" not in text
    items = json.loads(text)
    assert [(i["trial"], i["state"], i["direction"]) for i in items] == [
        (0, "succeeded", "maximize"),
        (1, "pruned", "maximize"),
        (2, "queued", "maximize"),
    ]
    assert items[2]["started_at"] is None  # queued: no run yet, by JobState.QUEUED
    out = io.StringIO()
    cli.write_csv(built, out)
    assert [r["state"] for r in csv.DictReader(io.StringIO(out.getvalue()))] == [
        "succeeded",
        "pruned",
        "queued",
    ]


@pytest.mark.parametrize("given", [MAX, "maximize", " MAXIMIZE "])
def test_a_direction_is_taken_as_the_enum_or_its_name(given):
    assert R.objective([], metric="loss", direction=given).direction is MAX
    assert R.objective([], search={"metric": "loss", "direction": given}).direction is MAX
