"""Hostile metric lines against real workers: a search whose metric no trial prints stops
when its first trial ends, saying what it printed; a trial ending in NaN fails for its search
while the search goes on to its end; nested and huge lines among a flood neither hang a
trial nor fill its record."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from state.search.view import read_search
from tests.harness.cli import CLI_HANG_S
from tests.waiting import wait_until

pytestmark = pytest.mark.e2e
JOB = Path(__file__).with_name("searchjob.py")
HOST = {"cuda_devices": [], "ram_total_gib": 8, "cpu_cores": 4}
RECORD_MAX_BYTES = 100_000  # a job's whole record, whatever its output printed


def manifest(chaos, metric="loss", mode="", trials=4, parallel=2, max_failures=5, epochs=5):
    path = chaos.root / f"search-{mode or metric}.toml"
    path.write_text(f'''[[jobs]]
name = "tune"
command = ["{sys.executable}", "{JOB}", "0.05", "{mode}"]
hyper = {{ epochs = {epochs} }}
timeout_s = 120
[jobs.search]
trials = {trials}
parallel = {parallel}
metric = "{metric}"
pruner = "none"
max_failures = {max_failures}
seed = 3
[jobs.search.space]
x = {{ low = -4.0, high = 4.0 }}
''')
    return path


def finished(chaos, sid: str, timeout_s: float = 120):
    return wait_until(
        "the search to finish",
        lambda: (v := read_search(chaos.client(), sid)).done and v,
        timeout_s,
        detail=chaos.logs,
    )


def test_a_search_whose_metric_no_trial_prints_stops_at_its_first_trial_naming_what_it_printed(
    chaos,
):
    chaos.start("m-a", capability=HOST)
    sid = chaos.publish(manifest(chaos, metric="val_loss", trials=12, max_failures=3))["tune"]
    done = finished(chaos, sid)
    assert done.counts["succeeded"] == 0 and done.counts["failed"] >= 1
    assert done.ended <= 1 + 1  # the first to end, and the one running beside it
    assert done.stopped.startswith("metric 'val_loss' is in no line trial")
    assert "(it printed loss)" in done.stopped and "[jobs.search]" in done.stopped
    status = chaos.fleet("status").stdout
    assert "metric 'val_loss' is in no line trial" in status and "printed loss" in status, status
    why = chaos.fleet("why", "tune[trial=0]").stdout
    assert "no 'val_loss' in trial 0's metric lines; it printed loss" in why, why
    shown = chaos.fleet("show", "tune[trial=0]")
    assert "tune[trial=0]" in shown.stdout
    wrong = subprocess.run(
        [sys.executable, "-m", "fleet.cli", "results", "tune", "--metric", "los"],
        env=chaos.env,
        capture_output=True,
        text=True,
        timeout=CLI_HANG_S,
    )
    assert wrong.returncode != 0 and "did you mean 'loss'?" in wrong.stderr, wrong


def test_a_trial_ending_in_nan_fails_for_its_search_and_the_search_goes_on(chaos, tmp_path):
    chaos.start("n-a", capability=HOST)
    sid = chaos.publish(manifest(chaos, mode="nan0", trials=4, parallel=2))["tune"]
    done = finished(chaos, sid)
    assert (done.issued, done.ended, done.counts["failed"], done.counts["succeeded"]) == (
        4,
        4,
        1,
        3,
    ), done.summary()
    assert done.trials[0].reason == "trial 0 ended with loss=nan, not a result"
    assert done.best_trial != 0 and done.best_value is not None
    board = json.loads(chaos.fleet("results", "tune", "--json").stdout)
    assert board[0]["trial"] == done.best_trial and board[0]["value"] == done.best_value
    assert next(r for r in board if r["trial"] == 0)["value"] is None
    db = f"sqlite:///{tmp_path / 'study.db'}"
    assert chaos.fleet("export", "optuna", "tune", "--storage", db).returncode == 0


def test_nested_and_huge_lines_in_a_flood_neither_hang_a_trial_nor_fill_its_record(chaos):
    chaos.start("f-a", capability=HOST)
    sid = chaos.publish(manifest(chaos, mode="flood", trials=1, parallel=1, epochs=20))["tune"]
    done = finished(chaos, sid, timeout_s=90)
    trial = done.trials[0]
    assert trial.state == "succeeded" and trial.value == pytest.approx(
        (trial.params["x"] - 1) ** 2 + 4 / 20
    )
    client = chaos.client()
    record = client.hgetall(f"fleet:job:{trial.job_id}")
    size = sum(len(k) + len(v) for k, v in record.items())
    assert size < RECORD_MAX_BYTES, {k: len(v) for k, v in record.items()}
    result = json.loads(record[b"result"])
    assert result["bad_metric_lines"]["count"] == 2
    assert result["bad_metric_lines"]["first"].startswith("JSON nested too deeply")
    logs = chaos.fleet("logs", "tune[trial=0]").stdout
    assert "bad FLEET_METRIC line, not read (counted): JSON nested too deeply" in logs
    assert len(chaos.fleet("show", "tune[trial=0]").stdout) < RECORD_MAX_BYTES
    assert len(chaos.fleet("status", "--all").stdout) < 20_000
