"""A yielding host on a real GPU (``pytest -m gpu -s tests/gpu``): a plain CUDA process of the
test's own appears on the GPU a fleet job holds; the worker sees it through NVML, counts its
own job's process as fleet's, hands the job back and keeps the GPU free until the owner's
process has been gone for FLEET_YIELD_RECLAIM_S. Reports the time from the owner's process
appearing to the GPU being free of fleet's job."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path

import psutil
import pytest

from routing.detect import detect_raw
from routing.yielding import HANDBACK_WITHIN_S
from state.jobrecord import JobState
from tests.harness.gpus import NO_GPU, cuda_manifest, gpu_pids, needs_whole_gpus
from tests.waiting import wait_until

OWNER = Path(__file__).with_name("owner_cuda.py")
RECLAIM_S = 3.0
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(NO_GPU is not None, reason=NO_GPU or "")]


def test_a_cuda_process_of_the_owners_makes_the_worker_hand_its_job_back_and_wait(chaos):
    needs_whole_gpus()
    gpu = detect_raw().cuda_devices[0]
    if gpu_pids(gpu.uuid):
        pytest.skip(
            f"GPU 0 already runs pids {sorted(gpu_pids(gpu.uuid))}: "
            "a yielding worker would yield at once"
        )
    one_gpu = {k: v for k, v in asdict(gpu).items() if k != "index"}
    chaos.start(
        "gpu-yield",
        capability={"cuda_devices": [one_gpu]},
        FLEET_YIELD="1",
        FLEET_YIELD_RECLAIM_S=str(RECLAIM_S),
    )
    ids = chaos.publish(cuda_manifest(chaos, {"held": 20.0}))
    job = ids["held"]
    fleet_pids = wait_until("the job on the GPU", lambda: gpu_pids(gpu.uuid), 120, chaos.logs, 0.02)
    if not all(psutil.pid_exists(p) for p in fleet_pids):
        pytest.skip(
            f"NVML names pids {sorted(fleet_pids)} from another pid namespace (a container): "
            "yielding by process list needs the host's (docs/yielding.md)"
        )
    time.sleep(4)  # two polls: the job's own process never makes the worker yield
    assert chaos.records().get(job).state is JobState.RUNNING, chaos.logs()

    owner = subprocess.Popen(
        [sys.executable, str(OWNER)],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "CUDA_VISIBLE_DEVICES": gpu.uuid},
    )
    try:
        assert owner.stdout.readline().strip() == "ready"
        t0 = time.monotonic()
        wait_until(
            "the job's process off the GPU",
            lambda: not (gpu_pids(gpu.uuid) & fleet_pids),
            HANDBACK_WITHIN_S + 5,
            chaos.logs,
            0.02,
        )
        freed_s = time.monotonic() - t0
        print(
            f"\nGPU {gpu.name}: free of fleet's job {freed_s:.2f} s "
            "after the owner's CUDA process appeared"
        )
        assert freed_s < HANDBACK_WITHIN_S
        rec = wait_until(
            "the job back in its queue",
            lambda: (r := chaos.records().get(job)).state is JobState.QUEUED and r,
            30,
            chaos.logs,
            0.02,
        )
        assert f"GPU 0 in use by pid {owner.pid}" in rec.last_error
        hosts = json.loads(chaos.fleet("hosts", "--json").stdout)
        assert hosts[0]["yielded"] == {"0": f"GPU 0 in use by pid {owner.pid} (not fleet)"}
        time.sleep(3)
        assert chaos.records().get(job).state is JobState.QUEUED, (
            "taken again while the owner used the GPU"
        )
    finally:
        owner.kill()
        owner.wait()
    rec = chaos.wait(ids, timeout_s=180)["held"]
    assert rec.state is JobState.SUCCEEDED and rec.attempts == 1 and rec.runs == 2
