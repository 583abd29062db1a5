"""The built-in mlp trainer across several (simulated) GPUs: one process per GPU under
torch.distributed.run, DistributedDataParallel with gloo on CPU, rank 0 alone reporting."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import psutil
import pytest

pytest.importorskip("torch")

from tests.harness.trainers import DATA, assert_trained, metric_reports, run_trainer
from trainers.distributed import World, shard  # noqa: E402


def test_a_2_gpu_mlp_job_trains_in_two_processes_and_reports_once(tmp_path, monkeypatch):
    monkeypatch.setenv("FLEET_GPUS", "2")
    done, out = run_trainer(
        tmp_path, "mlp", {"epochs": 3, "hidden_sizes": "16,8"}, DATA / "moons.parquet"
    )
    metrics = assert_trained(done, out, "model.pt")
    assert metrics["processes"] == 2
    assert [r["epoch"] for r in metric_reports(done.stdout)] == [1, 2, 3]  # rank 0 only
    assert done.stdout.count("loaded ") == 1
    assert metrics["valid"]["accuracy"] > 0.7


def test_one_gpu_runs_one_process_as_before(tmp_path, monkeypatch):
    monkeypatch.setenv("FLEET_GPUS", "1")
    done, out = run_trainer(
        tmp_path, "mlp", {"epochs": 2, "hidden_sizes": "8"}, DATA / "moons.parquet"
    )
    assert assert_trained(done, out, "model.pt")["processes"] == 1


def test_stopping_a_multi_process_job_ends_every_process(tmp_path):
    import json

    spec = tmp_path / "spec.json"
    spec.write_text(
        json.dumps(
            {
                "model": "mlp",
                "hyper": {"epochs": 10000, "hidden_sizes": "64,64"},
                "seed": 1,
                "job_id": "j",
                "name": "long",
            }
        )
    )
    env = {
        **os.environ,
        "FLEET_GPUS": "2",
        "FLEET_JOB_SPEC": str(spec),
        "FLEET_DATA_PATH": str(DATA / "moons.parquet"),
        "FLEET_OUTPUT_DIR": str(tmp_path / "out"),
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "trainers.run"],
        env=env,
        start_new_session=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    deadline = time.monotonic() + 60
    while len(psutil.Process(proc.pid).children(recursive=True)) < 2:
        assert proc.poll() is None, proc.stdout.read().decode()
        assert time.monotonic() < deadline, "torchrun did not start two ranks"
        time.sleep(0.2)
    group = [proc.pid] + [c.pid for c in psutil.Process(proc.pid).children(recursive=True)]
    # what the job's supervisor does (tasks/supervisor.py _kill_group): SIGTERM the group,
    # wait for the launcher (torchrun) to end, then SIGKILL the group, so a rank still blocked
    # in a collective (its partner gone) cannot outlive the job; a full-suite run caught two
    # ranks alive 15 s after a SIGTERM alone
    os.killpg(proc.pid, signal.SIGTERM)
    proc.wait(timeout=30)  # the launcher itself ends on SIGTERM
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    gone, alive = psutil.wait_procs(
        [psutil.Process(p) for p in group if psutil.pid_exists(p)], timeout=15
    )
    assert not alive


def test_every_rank_gets_an_equal_shard_covering_the_epoch():
    import torch

    order = torch.arange(10)
    parts = [shard(order, World(rank, rank, 3)) for rank in range(3)]
    assert {len(p) for p in parts} == {4}
    assert set(torch.cat(parts).tolist()) == set(range(10))
