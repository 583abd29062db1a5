"""`fleet results`, `fleet plot` and `fleet export mlflow` on a real Redis holding a sweep's
records and metric histories; the export goes to a real MLflow tracking store (SQLite) and
running it again updates the same runs, never duplicating a run or a metric point."""

import csv
import io
import json

import pytest

from core import constants as C
from state import history

pytestmark = pytest.mark.integration
LRS = (0.1, 0.01, 0.001)
CURVES = {0.1: [0.9, 0.7, 0.6], 0.01: [0.8, 0.4, 0.3], 0.001: [0.95, 0.9]}
START = 1_764_000_000.0  # the first point's run started then (seconds since the epoch)


def jid(i: int) -> str:
    return f"{i + 1:064x}"


def seed_sweep(client, states=("succeeded", "succeeded", "running")) -> None:
    """Three points of a grid sweep as publish and the workers leave them.

    Their records, names and histories.
    """
    for i, (lr, state) in enumerate(zip(LRS, states, strict=True)):
        name = f"grid[learning_rate={lr}]"
        client.hset(
            C.JOB_KEY + jid(i),
            mapping={
                "job_id": jid(i),
                "name": name,
                "state": state,
                "worker": f"host-{i}",
                "gpu": "0:sim-A100",
                "gpu_s": "30.5",
                "core_s": "61",
                "owner": "ana",
                "created_at": str(1000 + i),
                "started_at": str(START + 100 * i),
                **({"finished_at": str(START + 100 * i + 50)} if state != "running" else {}),
                "spec": json.dumps({"hyper": {"epochs": 3, "learning_rate": lr}, "seed": 0}),
                **(
                    {
                        "artifact": json.dumps(
                            {"uri": f"s3://b/runs/{i}.tar.zst", "sha256": f"{i}" * 64, "size": 1}
                        )
                    }
                    if state == "succeeded"
                    else {}
                ),
            },
        )
        client.zadd(C.JOBS_INDEX, {jid(i): 1000 + i})
        client.hset(C.NAMES_INDEX, name, jid(i))
        history.append(
            client,
            jid(i),
            [
                {
                    "step": s + 1,
                    "epoch": s + 1,
                    "epochs": 3,
                    "t": START + 100 * i + 10 + s,
                    "run": 1,
                    "valid_loss": v,
                    "train_loss": v / 2,
                }
                for s, v in enumerate(CURVES[lr])
            ],
        )


def run_cli(fleet_cli, capsys, *argv) -> tuple[int, str, str]:
    code = fleet_cli(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_results_json_is_the_sweep_best_first_with_its_varied_params(
    fleet_cli, redis_client, capsys
):
    seed_sweep(redis_client)
    code, out, _ = run_cli(fleet_cli, capsys, "results", "grid", "--json")
    items = json.loads(out)
    assert code == 0
    assert [i["params"] for i in items] == [
        {"learning_rate": 0.01},
        {"learning_rate": 0.1},
        {"learning_rate": 0.001},
    ]
    best = items[0]
    assert (best["value"], best["best_value"], best["steps"], best["host"], best["best"]) == (
        0.3,
        0.3,
        3,
        "host-1",
        True,
    )
    assert (
        best["metric"] == "valid_loss" and best["state"] == "succeeded" and best["job_id"] == jid(1)
    )
    assert items[2]["state"] == "running" and items[2]["steps"] == 2


def test_results_csv_and_table_name_every_point(fleet_cli, redis_client, capsys):
    seed_sweep(redis_client)
    code, out, _ = run_cli(fleet_cli, capsys, "results", "grid", "--csv", "--metric", "train_loss")
    rows = list(csv.DictReader(io.StringIO(out)))
    assert code == 0 and [r["value"] for r in rows] == ["0.15", "0.3", "0.45"]
    code, out, _ = run_cli(fleet_cli, capsys, "results", "grid")
    assert code == 0 and "grid: 3 sweep points (2 succeeded, 1 running)" in out
    assert "valid_loss (minimize, guessed; trainer's)" in out
    assert "learning_rate=0.01" in out and "30 GPU-s" in out


def test_results_for_a_name_nothing_has_says_so(fleet_cli, redis_client, capsys):
    seed_sweep(redis_client)
    code, _, err = run_cli(fleet_cli, capsys, "results", "nothing-here")
    assert code == 1 and "no job named 'nothing-here'" in err


def test_plot_writes_the_sweeps_picture(fleet_cli, redis_client, capsys, tmp_path):
    pytest.importorskip("matplotlib")
    seed_sweep(redis_client)
    code, out, _ = run_cli(fleet_cli, capsys, "plot", "grid", "-o", str(tmp_path / "grid.png"))
    assert code == 0 and "3 trials" in out
    assert (tmp_path / "grid.png").read_bytes()[:4] == b"\x89PNG"


def mlflow_runs(uri: str, experiment: str):
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    exp = client.get_experiment_by_name(experiment)
    runs = client.search_runs([exp.experiment_id])
    return client, {r.data.tags["fleet.job_id"]: r for r in runs}, len(runs)


def test_export_mlflow_writes_each_job_as_a_run_and_again_updates_without_duplicates(
    fleet_cli, redis_client, capsys, tmp_path
):
    pytest.importorskip("mlflow")
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    seed_sweep(redis_client)
    code, out, _ = run_cli(
        fleet_cli, capsys, "export", "mlflow", "grid", "--tracking-uri", uri, "--json"
    )
    assert code == 0 and json.loads(out)["created"] == 3
    client, runs, n = mlflow_runs(uri, "grid")
    assert n == 3
    best = runs[jid(1)]
    # the fixed hyperparameters too, not only the varied one
    assert best.data.params == {"learning_rate": "0.01", "epochs": "3"}
    assert best.data.tags["fleet.host"] == "host-1" and best.data.tags["fleet.owner"] == "ana"
    assert (
        best.data.tags["fleet.gpus"] == "0:sim-A100"
        and best.data.tags["fleet.state"] == "succeeded"
    )
    assert best.data.tags["fleet.bundle_uri"] == "s3://b/runs/1.tar.zst"
    assert best.data.tags["fleet.bundle_sha256"] == "1" * 64 and best.info.status == "FINISHED"
    assert [
        (m.step, m.value) for m in client.get_metric_history(best.info.run_id, "valid_loss")
    ] == [(1, 0.8), (2, 0.4), (3, 0.3)]
    assert runs[jid(2)].info.status == "RUNNING"

    # the running point finishes with a third step; export again
    history.append(
        redis_client,
        jid(2),
        [{"step": 3, "t": START + 213, "run": 1, "valid_loss": 0.85, "train_loss": 0.4}],
    )
    redis_client.hset(
        C.JOB_KEY + jid(2), mapping={"state": "succeeded", "finished_at": str(START + 250)}
    )
    code, out, _ = run_cli(
        fleet_cli, capsys, "export", "mlflow", "grid", "--tracking-uri", uri, "--json"
    )
    done = json.loads(out)
    # only the point that changed counts as updated
    assert code == 0 and (done["created"], done["updated"], done["unchanged"]) == (0, 1, 2)
    assert done["points"] == 2  # valid_loss and train_loss of the one new step
    client, runs, n = mlflow_runs(uri, "grid")
    assert n == 3
    late = runs[jid(2)]
    assert late.info.status == "FINISHED" and late.data.tags["fleet.state"] == "succeeded"
    assert late.info.end_time == (START + 250) * 1000
    assert [m.step for m in client.get_metric_history(late.info.run_id, "valid_loss")] == [1, 2, 3]
    assert [m.step for m in client.get_metric_history(runs[jid(1)].info.run_id, "valid_loss")] == [
        1,
        2,
        3,
    ]
    # nothing changed since: nothing is said to be updated
    code, out, _ = run_cli(
        fleet_cli, capsys, "export", "mlflow", "grid", "--tracking-uri", uri, "--json"
    )
    done = json.loads(out)
    assert (done["created"], done["updated"], done["unchanged"], done["points"]) == (0, 0, 3, 0)
    code, out, _ = run_cli(fleet_cli, capsys, "export", "mlflow", "grid", "--tracking-uri", uri)
    assert "0 run(s) created, 0 updated, 3 unchanged, 0 metric point(s)" in out


def test_mlflow_runs_carry_the_trials_own_times_and_open_on_their_runs(
    fleet_cli, redis_client, capsys, tmp_path
):
    pytest.importorskip("mlflow")
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    seed_sweep(redis_client)
    code, _, _ = run_cli(fleet_cli, capsys, "export", "mlflow", "grid", "--tracking-uri", uri)
    client, runs, _ = mlflow_runs(uri, "grid")
    exp = client.get_experiment_by_name("grid")
    assert code == 0 and exp.tags["mlflow.experimentKind"] == "custom_model_development"
    for i, lr in enumerate(LRS):
        run = runs[jid(i)]
        start = (START + 100 * i) * 1000
        assert run.info.start_time == start
        if i < 2:  # ended: at its record's finished_at
            assert run.info.end_time == start + 50_000
        # the step keys are the x axis, not series
        assert set(run.data.metrics) == {"valid_loss", "train_loss"}
        stamps = [m.timestamp for m in client.get_metric_history(run.info.run_id, "valid_loss")]
        assert stamps == [start + 10_000 + 1000 * s for s in range(len(CURVES[lr]))]
        assert all(start <= t <= (run.info.end_time or t) for t in stamps)
    note = runs[jid(1)].data.tags["mlflow.note.content"]
    assert "s3://b/runs/1.tar.zst" in note and "1" * 64 in note
    assert "no bundle stored" in runs[jid(2)].data.tags["mlflow.note.content"]


def seed_search(client) -> None:
    """A search's state (state/search/store.py's contract) and three of its trials' records."""
    from state.search import store as search

    config = {
        "trials": 8,
        "parallel": 2,
        "metric": "acc",
        "direction": "maximize",
        "space": {"lr": {"low": 0.01, "high": 1.0, "log": False, "int": False, "step": None}},
    }
    client.hset(
        search.key("s1"),
        mapping={"id": "s1", "name": "tune", "config": json.dumps(config), "issued": "3"},
    )
    client.hset(C.SEARCHES_KEY, "tune", "s1")
    for n, (state, accs) in enumerate(
        [("succeeded", [0.5, 0.7]), ("pruned", [0.2]), ("succeeded", [0.6, 0.8])]
    ):
        name = f"tune[trial={n}]"
        client.hset(
            C.JOB_KEY + jid(n),
            mapping={
                "job_id": jid(n),
                "name": name,
                "state": state,
                "worker": "h",
                "search": "s1",
                "trial": str(n),
                "params": json.dumps({"lr": 0.1 * (n + 1)}),
                "created_at": str(100 - n),
                "started_at": str(START + 60 * n),
                "finished_at": str(START + 60 * n + 30),
                "spec": json.dumps({"hyper": {"lr": 0.5}, "seed": 0}),
            },
        )
        client.hset(C.NAMES_INDEX, name, jid(n))
        history.append(
            client,
            jid(n),
            [
                {"step": s + 1, "t": 1.0, "run": 1, "acc": a, "loss": 1 - a}
                for s, a in enumerate(accs)
            ],
        )


def test_results_of_a_search_rank_by_its_metric_and_direction_with_its_trial_numbers(
    fleet_cli, redis_client, capsys
):
    seed_search(redis_client)
    code, out, _ = run_cli(fleet_cli, capsys, "results", "tune", "--json")
    items = json.loads(out)
    assert code == 0 and [i["trial"] for i in items] == [2, 0, 1]
    assert (
        items[0]["metric"] == "acc"
        and items[0]["direction"] == "maximize"
        and items[0]["value"] == 0.8
    )
    assert items[0]["params"] == {"lr": pytest.approx(0.3)} and items[2]["state"] == "pruned"
    code, out, _ = run_cli(fleet_cli, capsys, "results", "tune")
    assert "tune: 3 trials (" in out and "acc (maximize; search)" in out


def test_a_pruned_trials_final_value_is_the_one_its_search_pruned_it_at(
    fleet_cli, redis_client, capsys
):
    seed_search(redis_client)  # trial 1 was pruned at acc 0.2; it printed 0.9 while being stopped
    from state.search import store as search

    redis_client.hset(search.key("s1", "trial", 1), mapping={"state": "pruned", "value": "0.2"})
    history.append(redis_client, jid(1), [{"step": 2, "t": 2.0, "run": 1, "acc": 0.9}])
    code, out, _ = run_cli(fleet_cli, capsys, "results", "tune", "--json")
    pruned = next(i for i in json.loads(out) if i["trial"] == 1)
    assert (
        code == 0
        and pruned["value"] == 0.2
        and pruned["best_value"] == 0.9
        and pruned["steps"] == 2
    )


def test_export_optuna_writes_each_trial_with_its_own_times_state_and_steps(
    fleet_cli, redis_client, capsys, tmp_path
):
    optuna = pytest.importorskip("optuna")
    from datetime import datetime

    seed_search(redis_client)
    db = f"sqlite:///{tmp_path / 'study.db'}"
    code, out, _ = run_cli(fleet_cli, capsys, "export", "optuna", "tune", "--storage", db)
    assert code == 0 and "(3 trials)" in out and "replacing" not in out
    study = optuna.load_study(study_name="tune", storage=db)
    by_number = {t.number: t for t in study.trials}
    assert [by_number[n].state.name for n in range(3)] == ["COMPLETE", "PRUNED", "COMPLETE"]
    assert study.best_trial.number == 2 and study.best_value == 0.8
    for n, t in by_number.items():
        assert t.datetime_start == datetime.fromtimestamp(START + 60 * n)
        assert t.datetime_complete == datetime.fromtimestamp(START + 60 * n + 30)
        assert t.params == {"lr": pytest.approx(0.1 * (n + 1))}
        assert t.user_attrs["fleet_job_id"] == jid(n)
    assert by_number[0].intermediate_values == {1: 0.5, 2: 0.7}
    assert by_number[1].intermediate_values == {1: 0.2} and by_number[1].value == 0.2
    code, out, _ = run_cli(fleet_cli, capsys, "export", "optuna", "tune", "--storage", db)
    assert code == 0 and "replacing the earlier export" in out
    assert len(optuna.load_study(study_name="tune", storage=db).trials) == 3


def test_an_export_of_a_search_that_does_not_exist_fails_like_every_verb(fleet_cli, capsys):
    code, out, err = run_cli(fleet_cli, capsys, "export", "optuna", "nosuch", "--storage", "x")
    assert code == 1 and not out
    assert err.startswith("fleet: no search named 'nosuch'; `fleet status` lists searches")
