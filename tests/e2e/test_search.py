"""A search driven by the fleet itself: 30 trials on two hosts, one host killed
with -9 mid-search and Redis restarted; every trial ends once, never more than `parallel`
at once, some pruned early, the best near the optimum, and the exports work."""

from __future__ import annotations

import json
import os
import signal
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import redis

from fleet.redis_server import RedisServer
from state.jobrecord import JobState
from state.search.view import read_search
from tests.harness.chaos import Chaos, chaos_fleet
from tests.waiting import wait_until

pytestmark = pytest.mark.e2e
JOB = Path(__file__).with_name("searchjob.py")
HOST = {"cuda_devices": [], "ram_total_gib": 8, "cpu_cores": 4}
TRIALS, PARALLEL, EPOCHS = 30, 4, 10
OPTIMUM = 0.4  # the best final loss is 0 + 4/EPOCHS, at x = 1, kind = "b"


def manifest(chaos) -> Path:
    path = chaos.root / "search.toml"
    path.write_text(f'''[[jobs]]
name = "tune"
command = ["{sys.executable}", "{JOB}", "0.1"]
artifacts = ["out/*"]
hyper = {{ epochs = {EPOCHS} }}
[jobs.search]
trials = {TRIALS}
parallel = {PARALLEL}
metric = "loss"
sampler = "tpe"
pruner = "median"
last_step = {EPOCHS - 1}
seed = 7
[jobs.search.space]
x = {{ low = -4.0, high = 4.0 }}
kind = {{ choices = ["a", "b"] }}
''')
    return path


def most_at_once(records) -> int:
    """The most trials whose runs overlapped, from their records' start and end times."""
    edges = sorted([(r.started_at, 1) for r in records] + [(r.finished_at, -1) for r in records])
    now = peak = 0
    for _, d in edges:
        now += d
        peak = max(peak, now)
    return peak


@dataclass(frozen=True)
class Finished:
    """One search run to its end through a worker killed with -9 and a Redis restart."""

    chaos: Chaos
    issued_at_publish: int
    done: object  # state.search's view of the finished search
    records: list  # its trials' job records, by trial number
    tmp: Path


@pytest.fixture(scope="module")
def search(tmp_path_factory, s3_server):
    """The search the tests below look at: run once (a few minutes) and shared, as no test
    changes it."""
    root = tmp_path_factory.mktemp("search")
    with pytest.MonkeyPatch.context() as mp, chaos_fleet(root, s3_server, mp) as chaos:
        for h in ("search-a", "search-b"):
            chaos.start(h, capability=HOST)
        sid = chaos.publish(manifest(chaos))["tune"]

        def view():
            try:
                return read_search(chaos.client(), sid)
            except redis.ConnectionError:  # Redis restarting: look again
                return None

        issued = view().issued

        def ended(n: int):
            return lambda: (v := view()) and v.ended >= n and v

        six = ended(6)
        wait_until("six trials end", lambda: (v := six()) and v.running == PARALLEL, 60, chaos.logs)
        os.kill(chaos.workers["search-a"].pid, signal.SIGKILL)  # its runs end by their leases
        chaos.workers["search-a"].wait()
        wait_until("twelve trials end", ended(12), 60, chaos.logs)
        port, data = chaos.redis.port, chaos.redis.data_dir
        chaos.redis.stop()  # SIGTERM: its AOF is flushed
        chaos.redis = RedisServer(data, port=port).start()
        chaos.start("search-a", wait=False, capability=HOST)
        done = wait_until(
            "the search ends", lambda: (v := view()) and v.done and v, 150, chaos.logs
        )
        recs = [chaos.records().get(t.job_id) for t in done.trials]
        yield Finished(chaos, issued, done, recs, root)


def test_a_search_issues_parallel_trials_at_once_when_published(search):
    assert search.issued_at_publish == PARALLEL


def test_every_trial_ends_once_through_a_killed_worker_and_a_redis_restart(search):
    done = search.done
    assert (done.issued, done.ended, done.running, done.stopped) == (TRIALS, TRIALS, 0, ""), done
    assert [r.name for r in search.records] == [f"tune[trial={n}]" for n in range(TRIALS)]
    states = [r.state for r in search.records]
    assert all(s in (JobState.SUCCEEDED, JobState.PRUNED) for s in states), states
    assert done.counts[JobState.SUCCEEDED] + done.counts[JobState.PRUNED] == TRIALS


def test_never_more_trials_run_at_once_than_the_search_allows(search):
    assert most_at_once(search.records) <= PARALLEL


def pruned(search) -> list:
    return [t for t in search.done.trials if t.state is JobState.PRUNED]


def test_a_pruned_trial_always_stopped_before_its_last_step(search):
    # pruned means stopped early: none of them reported the last step (epoch EPOCHS - 1)
    stopped = pruned(search)
    assert stopped and all(max(t.steps) < EPOCHS - 1 for t in stopped), [
        sorted(t.steps) for t in stopped
    ]


def test_a_pruned_trials_task_ends_pruned_in_the_result_backend_not_success(search):
    # Flower and the result backend count it as fleet does
    from celery import Celery

    url = search.chaos.redis.url
    results = Celery("probe", broker=url, backend=url)
    assert {results.AsyncResult(t.job_id).state for t in pruned(search)} == {"PRUNED"}


def test_every_trial_keeps_its_outputs_pruned_ones_too(search):
    assert all(r.artifact for r in search.records)


def test_the_search_finds_a_value_near_the_optimum(search):
    assert search.done.best_value is not None
    assert search.done.best_value < OPTIMUM + 0.5, search.done.summary()


def test_fleet_status_shows_the_search_as_one_line_and_its_trials_only_with_all(search):
    status = search.chaos.fleet("status")
    assert f"tune: search {TRIALS}/{TRIALS}" in status.stdout, status
    assert "tune[trial=" not in status.stdout, status
    assert "tune[trial=" in search.chaos.fleet("status", "--all", "--wide").stdout


def test_the_optuna_export_holds_every_trial_with_its_params_and_steps(search):
    import optuna

    db = f"sqlite:///{search.tmp / 'study.db'}"
    out = search.chaos.fleet("export", "optuna", "tune", "--storage", db)
    assert out.returncode == 0, out.stderr
    study = optuna.load_study(study_name="tune", storage=db)
    assert len(study.trials) == TRIALS
    assert study.best_value == pytest.approx(search.done.best_value)
    by_number = {t.number: t for t in study.trials}
    for t, rec in zip(search.done.trials, search.records, strict=True):
        exported = by_number[t.number]
        assert exported.params == t.params
        # the trial's metric history: every step its pruner judged, and any it printed after
        assert t.steps.items() <= exported.intermediate_values.items()
        # its own times, not the export's
        assert exported.datetime_start.timestamp() == pytest.approx(rec.started_at, abs=1e-3)
        assert exported.datetime_complete.timestamp() == pytest.approx(rec.finished_at, abs=1e-3)


def test_fleet_results_ranks_the_best_trial_first(search):
    board = json.loads(search.chaos.fleet("results", "tune", "--json").stdout)
    assert len(board) == TRIALS and board[0]["trial"] == search.done.best_trial
    assert board[0]["best"] and board[0]["value"] == pytest.approx(search.done.best_value)


def test_fleet_plot_draws_the_search_as_a_png(search):
    png = search.tmp / "tune.png"
    search.chaos.fleet("plot", "tune", "-o", str(png))
    assert png.read_bytes()[:4] == b"\x89PNG"


def test_the_mlflow_export_creates_one_run_per_trial(search):
    uri = f"sqlite:///{search.tmp / 'mlflow.db'}"
    out = search.chaos.fleet("export", "mlflow", "tune", "--tracking-uri", uri, "--json")
    assert json.loads(out.stdout)["created"] == TRIALS


def test_a_trial_that_ran_to_its_last_step_is_complete_never_pruned(chaos):
    """ASHA's rungs at steps 1 and 3 of a 4-step budget (epochs 0..3): a trial judged at its
    last rung has run its whole budget; it is recorded succeeded, and Optuna told COMPLETE."""
    from state.search.store import SearchStore
    from state.search.study import Mirror

    chaos.start("last-step", capability=HOST)
    path = chaos.root / "last.toml"
    path.write_text(f'''[[jobs]]
name = "last"
command = ["{sys.executable}", "{JOB}", "0.05"]
hyper = {{ epochs = 4 }}
[jobs.search]
trials = 12
parallel = 4
metric = "loss"
sampler = "random"
pruner = {{ name = "asha", min_resource = 1, reduction_factor = 3 }}
last_step = 3
seed = 3
[jobs.search.space]
x = {{ low = -4.0, high = 4.0 }}
kind = {{ choices = ["a", "b"] }}
''')
    sid = chaos.publish(path)["last"]
    view = lambda: read_search(chaos.client(), sid)  # noqa: E731
    done = wait_until("the search ends", lambda: (v := view()).done and v, 120, chaos.logs)
    ran_all = [t for t in done.trials if t.steps and max(t.steps) == 3]
    assert ran_all and all(t.state is JobState.SUCCEEDED for t in ran_all), [
        (t.number, t.state, sorted(t.steps)) for t in done.trials
    ]
    assert all(max(t.steps) < 3 for t in done.trials if t.state is JobState.PRUNED)
    config = SearchStore(chaos.client()).config(sid)
    study = Mirror(sid, config).refresh(chaos.client()).study
    states = {t.number: t.state.name for t in study.get_trials(deepcopy=False)}
    assert all(states[t.number] == "COMPLETE" for t in ran_all), states
