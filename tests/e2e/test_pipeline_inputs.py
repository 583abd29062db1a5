"""The issue's pipeline on real workers, two hosts and an S3 store: prep -> tune (a search
taking prep's bundle) -> final (after tune, prep's bundle, tune's best values under its own
epochs). Each job writes what it saw into its outputs (tests/e2e/pipejob.py); the tests read
final's and the best trial's bundles from the store."""

from __future__ import annotations

import json
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest

from artifacts.stores import open_store
from core.settings import StoreSettings
from state.jobrecord import JobRecord, JobState
from state.search.view import read_search
from tests.harness.chaos import Chaos, chaos_fleet
from tests.harness.fleet import open_bundle

pytestmark = pytest.mark.e2e
JOB = Path(__file__).with_name("pipejob.py")
HOST = {"cuda_devices": [], "ram_total_gib": 8, "cpu_cores": 4}
ENDED = ("succeeded", "failed", "cancelled")


def manifest(root: Path) -> Path:
    path = root / "pipeline.toml"
    run = f'"{sys.executable}", "{JOB}"'
    path.write_text(f"""
[[jobs]]
name = "prep"
command = [{run}, "prep"]
artifacts = ["out/*"]

[[jobs]]
name = "tune"
after = ["prep"]
inputs = ["prep"]
command = [{run}, "train"]
artifacts = ["out/*"]
[jobs.search]
trials = 4
parallel = 2
metric = "loss"
seed = 3
[jobs.search.space]
lr = {{ low = 0.0, high = 1.0 }}
epochs = {{ low = 2, high = 4 }}

[[jobs]]
name = "final"
after = ["tune"]
inputs = ["prep"]
params_from = "tune"
hyper = {{ epochs = 200 }}
command = [{run}, "train", "--full"]
artifacts = ["out/*"]
""")
    return path


@dataclass(frozen=True)
class Ran:
    chaos: Chaos
    final: JobRecord
    best: JobRecord  # tune's best trial's record
    best_params: dict


def seen(chaos: Chaos, rec: JobRecord) -> dict:
    """What the job wrote it saw, read from its bundle in the store."""
    store = open_store(StoreSettings.from_env(chaos.env))
    path = store.get_bundle("command", rec.artifact["sha256"], chaos.root / f"{rec.job_id}.tar")
    with open_bundle(path) as tar:
        return json.loads(tar.extractfile("out/seen.json").read())


@pytest.fixture(scope="module")
def ran(tmp_path_factory, s3_server):
    """The pipeline published once and run to its end (a minute or two), shared by the tests
    below: none changes it."""
    root = tmp_path_factory.mktemp("pipeline")
    with pytest.MonkeyPatch.context() as mp, chaos_fleet(root, s3_server, mp) as chaos:
        chaos.env["FLEET_STORE_URL"] = f"s3://pipe-{uuid.uuid4().hex[:8]}/runs"
        for h in ("pipe-a", "pipe-b"):
            chaos.start(h, capability=HOST)
        refs = chaos.publish(manifest(root))
        recs = chaos.wait({"final": refs["final"]}, ENDED, timeout_s=240)
        done = read_search(chaos.client(), refs["tune"])
        best = done.trials[done.best_trial]
        yield Ran(chaos, recs["final"], chaos.records().get(best.job_id), best.params)


def test_final_runs_after_the_search_with_its_best_values_under_its_own(ran):
    assert ran.final.state is JobState.SUCCEEDED, ran.final.last_error
    assert ran.final.started_at > ran.best.finished_at
    assert ran.final.params == ran.best_params
    assert seen(ran.chaos, ran.final)["hyper"] == {"lr": ran.best_params["lr"], "epochs": 200}


def test_final_reads_preps_files_read_only_under_fleet_inputs(ran):
    saw = seen(ran.chaos, ran.final)
    assert saw["rows"] == "x,y\n1,2\n3,4\n"
    assert saw["rows_mode"] & 0o222 == 0, oct(saw["rows_mode"])  # read-only: no write bit
    assert {"prep/out/rows.txt", "prep/meta.json"} <= set(saw["inputs"])
    assert {f.split("/")[0] for f in saw["inputs"]} == {"prep"}  # one folder per input only


def test_each_trial_of_the_search_reads_preps_files_too(ran):
    saw = seen(ran.chaos, ran.best)
    assert saw["rows"] == "x,y\n1,2\n3,4\n"
    assert saw["hyper"] == ran.best_params


def test_finals_log_says_which_values_came_from_the_search(ran):
    out = ran.chaos.fleet("logs", "final").stdout
    assert f"params_from search tune: lr={ran.best_params['lr']} (its best trial's)" in out
    assert f"the job's own epochs=200 (not {ran.best_params['epochs']})" in out
    assert "input prep/: prep's bundle" in out
