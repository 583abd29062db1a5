"""A job holding two real GPUs through a real worker (``scripts/test-gpu``): CUDA shows it
exactly its two GPUs, named by UUID; it is pinned to its cores and runs under the supervisor
in its own process group; the built-in ``mlp`` trains with DistributedDataParallel over them.

Skipped, with the reason, on a host with fewer than two GPUs. What needs no GPU (the two
devices, the cores, the supervisor) is checked by the same ``multi_gpu.problems`` in the e2e
suite on simulated GPUs (tests/e2e/test_pools.py), so CI runs it too.
"""

from __future__ import annotations

import sys

import pytest

from routing.detect import detect_raw
from state.jobrecord import JobState
from tests.gpu import multi_gpu
from tests.harness.gpus import MOONS, TOO_FEW, needs_whole_gpus, reports, torch_cuda

CORES = 2


pytestmark = [pytest.mark.gpu, pytest.mark.skipif(TOO_FEW is not None, reason=TOO_FEW or "")]


def test_a_2_gpu_job_sees_its_two_gpus_by_uuid_on_its_pinned_cores_under_its_supervisor(chaos):
    needs_whole_gpus()
    uuids = {d.uuid for d in detect_raw().cuda_devices}
    chaos.start("gpu-pair", capability={})  # detected, not simulated
    path = chaos.root / "pair.toml"
    path.write_text(multi_gpu.manifest(sys.executable, "pair", 2, CORES, "cuda"))
    rec = chaos.wait(chaos.publish(path), timeout_s=300)["pair"]
    assert rec.state is JobState.SUCCEEDED and len(rec.gpu.split(",")) == 2, chaos.logs()
    assert multi_gpu.problems(reports(chaos, ["pair"])["pair"], 2, CORES, uuids) == []


def test_a_2_gpu_mlp_job_trains_with_ddp_over_both_gpus_through_a_real_worker(chaos, monkeypatch):
    if not torch_cuda():
        pytest.skip("torch here is a CPU build: scripts/test-gpu installs the CUDA one")
    needs_whole_gpus()
    # publish stages the data there
    monkeypatch.setenv("FLEET_STORE_URL", chaos.env["FLEET_STORE_URL"])
    chaos.start("gpu-ddp", capability={})
    path = chaos.root / "ddp.toml"
    path.write_text(
        f'[[jobs]]\nname = "ddp"\nmodel = "mlp"\ndata = "{MOONS}"\ngpus = 2\n'
        f"min_cores = {CORES}\nhyper = {{ epochs = 20 }}\n"
    )
    rec = chaos.wait(chaos.publish(path), timeout_s=600)["ddp"]
    assert rec.state is JobState.SUCCEEDED and len(rec.gpu.split(",")) == 2, chaos.logs()
    from artifacts.stores import open_store_at

    meta = open_store_at(chaos.env["FLEET_STORE_URL"]).get_meta("mlp", rec.artifact["sha256"])
    assert meta["metrics"]["device"] == "cuda" and meta["metrics"]["processes"] == 2
    print(f"\nmlp with DDP on 2 GPUs ({rec.gpu}): valid {meta['metrics']['valid']}")
