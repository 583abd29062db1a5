"""A search driven by the fleet itself (issue 23): 30 trials on two hosts, one host killed
with -9 mid-search and Redis restarted; every trial ends once, never more than `parallel`
at once, some pruned early, the best near the optimum, and the exports work."""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

import pytest

from fleet.redis_server import RedisServer
from state.records import JobState
from state.search.view import read_search
from tests.e2e.test_chaos import chaos  # noqa: F401  (the fixture)

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


def wait_until(predicate, timeout_s: float, what: str, chaos):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if value := predicate():
                return value
        except Exception:  # Redis restarting
            pass
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}\n{chaos.logs()}")


def most_at_once(records) -> int:
    """The most trials whose runs overlapped, from their records' start and end times."""
    edges = sorted([(r.started_at, 1) for r in records] + [(r.finished_at, -1) for r in records])
    now = peak = 0
    for _, d in edges:
        now += d
        peak = max(peak, now)
    return peak


def test_a_search_survives_a_killed_worker_and_a_redis_restart_and_finds_the_optimum(
    chaos, tmp_path
):
    started = time.monotonic()
    for h in ("search-a", "search-b"):
        chaos.start(h, capability=HOST)
    path = manifest(chaos)
    sid = chaos.publish(path)["tune"]
    view = lambda: read_search(chaos.client(), sid)  # noqa: E731
    assert view().issued == PARALLEL

    wait_until(
        lambda: view().ended >= 6 and view().running == PARALLEL, 60, "six trials to end", chaos
    )
    os.kill(chaos.workers["search-a"].pid, signal.SIGKILL)  # its watchman hands its runs on
    chaos.workers["search-a"].wait()
    wait_until(lambda: view().ended >= 12, 60, "twelve trials to end", chaos)
    port, data = chaos.redis.port, chaos.redis.data_dir
    chaos.redis.stop()  # SIGTERM: its AOF is flushed
    chaos.redis = RedisServer(data, port=port).start()
    chaos.start("search-a", wait=False, capability=HOST)

    done = wait_until(lambda: (v := view()).done and v, 150, "the search to finish", chaos)
    assert (done.issued, done.ended, done.running, done.stopped) == (TRIALS, TRIALS, 0, ""), done
    recs = [chaos.records().get(t.job_id) for t in done.trials]
    assert [r.name for r in recs] == [f"tune[trial={n}]" for n in range(TRIALS)]
    assert all(r.state in (JobState.SUCCEEDED, JobState.PRUNED) for r in recs), [
        r.state for r in recs
    ]
    assert most_at_once(recs) <= PARALLEL
    pruned = [t for t in done.trials if t.state is JobState.PRUNED]
    # pruned means stopped early: none of them reported the last step (epoch EPOCHS - 1)
    assert pruned and all(max(t.steps) < EPOCHS - 1 for t in pruned), [
        sorted(t.steps) for t in pruned
    ]
    assert all(r.artifact for r in recs)  # outputs kept, pruned too
    # the task ends PRUNED, not SUCCESS: Flower and the result backend count it as fleet does
    from celery import Celery

    results = Celery("probe", broker=chaos.redis.url, backend=chaos.redis.url)
    assert {results.AsyncResult(t.job_id).state for t in pruned} == {"PRUNED"}
    assert done.best_value is not None and done.best_value < OPTIMUM + 0.5, done.summary()
    assert done.counts[JobState.SUCCEEDED] + done.counts[JobState.PRUNED] == TRIALS

    status = chaos.fleet("status")
    assert (
        f"tune: search {TRIALS}/{TRIALS}" in status.stdout and "tune[trial=" not in status.stdout
    ), status
    assert "tune[trial=" in chaos.fleet("status", "--all", "--wide").stdout

    import optuna

    db = f"sqlite:///{tmp_path / 'study.db'}"
    out = chaos.fleet("export", "optuna", "tune", "--storage", db)
    assert out.returncode == 0, out.stderr
    study = optuna.load_study(study_name="tune", storage=db)
    assert len(study.trials) == TRIALS
    assert study.best_value == pytest.approx(done.best_value)
    by_number = {t.number: t for t in study.trials}
    for t in done.trials:
        exported = by_number[t.number]
        assert exported.params == t.params
        # the trial's metric history: every step its pruner judged, and any it printed after
        assert t.steps.items() <= exported.intermediate_values.items()
        rec = chaos.records().get(t.job_id)  # its own times, not the export's
        assert exported.datetime_start.timestamp() == pytest.approx(rec.started_at, abs=1e-3)
        assert exported.datetime_complete.timestamp() == pytest.approx(rec.finished_at, abs=1e-3)
    print(f"\n{done.summary()}; {time.monotonic() - started:.0f} s")

    # `fleet results`, `fleet plot` and `fleet export mlflow` (issue 23 items 5-7)
    # on the same search
    board = json.loads(chaos.fleet("results", "tune", "--json").stdout)
    assert len(board) == TRIALS and board[0]["trial"] == done.best_trial and board[0]["best"]
    assert board[0]["value"] == pytest.approx(done.best_value)
    png = tmp_path / "tune.png"
    chaos.fleet("plot", "tune", "-o", str(png))
    assert png.read_bytes()[:4] == b"\x89PNG"
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    assert (
        json.loads(chaos.fleet("export", "mlflow", "tune", "--tracking-uri", uri, "--json").stdout)[
            "created"
        ]
        == TRIALS
    )


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
    done = wait_until(lambda: (v := view()).done and v, 120, "the search to finish", chaos)
    ran_all = [t for t in done.trials if t.steps and max(t.steps) == 3]
    assert ran_all and all(t.state is JobState.SUCCEEDED for t in ran_all), [
        (t.number, t.state, sorted(t.steps)) for t in done.trials
    ]
    assert all(max(t.steps) < 3 for t in done.trials if t.state is JobState.PRUNED)
    config = SearchStore(chaos.client()).config(sid)
    study = Mirror(sid, config).refresh(chaos.client()).study
    states = {t.number: t.state.name for t in study.get_trials(deepcopy=False)}
    assert all(states[t.number] == "COMPLETE" for t in ran_all), states
