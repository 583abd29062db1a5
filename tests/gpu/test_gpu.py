"""The GPU suite: ``pytest -m gpu``, on a host with an NVIDIA GPU.

Skipped, with the reason, where there is none (no nvidia-smi, or NVML cannot start): CI
and most dev machines. Workers here detect the real GPUs (no simulated capability), run on
a local Redis and a ``file://`` store, and report figures with ``-s``. On a GPU host, one
command installs the CUDA build of torch where bootstrap put the CPU one, and runs it all:

    scripts/test-gpu
"""

from __future__ import annotations

from dataclasses import asdict

import pytest

from routing.detect import detect_raw
from state.jobrecord import JobState
from tests.harness.gpus import (
    MOONS,
    NO_GPU,
    SHARING,
    cuda_manifest,
    needs_visible_pids,
    needs_whole_gpus,
    reports,
    run_trainer,
    smi,
    torch_cuda,
    xgboost_cuda,
)

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(NO_GPU is not None, reason=NO_GPU or "")]


def test_nvml_detection_matches_nvidia_smi():
    cap = detect_raw()
    rows = smi("index", "name", "memory.total", "uuid", "driver_version")
    assert len(cap.cuda_devices) == len(rows)
    for dev, (index, name, mib, gpu_uuid, driver) in zip(cap.cuda_devices, rows, strict=True):
        assert (dev.index, dev.name, dev.uuid) == (int(index), name, gpu_uuid)
        assert abs(dev.vram_total_gib - float(mib) / 1024) < 0.02, (dev, mib)
        assert 0 < dev.vram_free_gib <= dev.vram_total_gib
        assert cap.driver_version == driver
    print(
        f"\nNVML sees {len(rows)} GPU(s): "
        + "; ".join(
            f"{d.index}: {d.name}, {d.vram_total_gib} GiB, cc {d.compute_capability}"
            for d in cap.cuda_devices
        )
    )


def test_the_mlp_trainer_trains_on_cuda(tmp_path):
    if not torch_cuda():
        pytest.skip(
            "torch here is a CPU build or sees no GPU: "
            "install a CUDA build of torch to train mlp on cuda"
        )
    metrics = run_trainer(tmp_path, "mlp", {"epochs": 20})
    assert metrics["device"] == "cuda" and metrics["valid"]["accuracy"] > 0.75


def test_xgboost_trains_with_device_cuda(tmp_path):
    if not xgboost_cuda():
        pytest.skip("this xgboost build cannot train on cuda (USE_CUDA off, or no usable GPU)")
    metrics = run_trainer(tmp_path, "gbt", {"n_estimators": 50})
    assert metrics["device"] == "cuda" and metrics["valid"]["accuracy"] > 0.85


def test_each_job_gets_a_gpu_of_its_own_through_cuda_visible_devices(chaos):
    needs_whole_gpus()
    gpus = detect_raw().cuda_devices
    chaos.start("gpu-slots", capability={})  # detected, not simulated: one slot per GPU
    names = [f"slot{i}" for i in range(2 * len(gpus))]
    ids = chaos.publish(cuda_manifest(chaos, {n: 2.0 for n in names}))
    recs = chaos.wait(ids, timeout_s=300)
    seen = reports(chaos, names)
    by_uuid = {d.uuid: d for d in gpus}
    for n in names:
        r = seen[n]
        assert r["count"] == 1 and r["visible"] == r["uuid"] and r["uuid"] in by_uuid, r
        assert recs[n].gpu.startswith(f"{by_uuid[r['uuid']].index}:")
    for a in names:  # two jobs that overlapped in time had different GPUs
        for b in names:
            overlap = (
                seen[a]["t_start"] < seen[b]["t_end"] and seen[b]["t_start"] < seen[a]["t_end"]
            )
            if a < b and overlap:
                assert seen[a]["uuid"] != seen[b]["uuid"], (seen[a], seen[b])
    assert {r["uuid"] for r in seen.values()} == set(by_uuid)  # every GPU did work


def test_a_cuda_tier_job_runs_end_to_end_on_the_gpu_through_a_real_worker(chaos, monkeypatch):
    # publish stages the data there
    monkeypatch.setenv("FLEET_STORE_URL", chaos.env["FLEET_STORE_URL"])
    model = "gbt" if xgboost_cuda() else "mlp" if torch_cuda() else None
    if model is None:
        pytest.skip("neither xgboost nor torch here can train on cuda")
    chaos.start("gpu-e2e", capability={})
    hyper = "{ n_estimators = 50 }" if model == "gbt" else "{ epochs = 20 }"
    path = chaos.root / "cuda-job.toml"
    path.write_text(
        f'[[jobs]]\nname = "on-gpu"\nmodel = "{model}"\ndata = "{MOONS}"\nrequire_cuda = true\n'
        f"min_vram_gib = 1\nhyper = {hyper}\n"
    )
    ids = chaos.publish(path)
    rec = chaos.wait(ids, timeout_s=300)["on-gpu"]
    assert rec.state is JobState.SUCCEEDED and rec.queue.startswith("cuda") and rec.gpu
    from artifacts.stores import open_store_at

    meta = open_store_at(chaos.env["FLEET_STORE_URL"]).get_meta(model, rec.artifact["sha256"])
    assert meta["metrics"]["device"] == "cuda" and meta["gpu"]["name"] in {
        d.name for d in detect_raw().cuda_devices
    }
    print(
        f"\n{model} on {meta['gpu']['name']}: {rec.artifact['uri']}, "
        f"valid {meta['metrics']['valid']}"
    )


def test_gpu_idle_time_between_two_back_to_back_jobs(chaos):
    needs_whole_gpus()
    first = detect_raw().cuda_devices[0]
    one_gpu = {k: v for k, v in asdict(first).items() if k != "index"}
    # one GPU: the jobs queue for it
    chaos.start("gpu-idle", capability={"cuda_devices": [one_gpu]})
    names = ["busy1", "busy2"]
    ids = chaos.publish(cuda_manifest(chaos, {n: 3.0 for n in names}))
    chaos.wait(ids, timeout_s=300)
    a, b = sorted(reports(chaos, names).values(), key=lambda r: r["t_start"])
    assert a["uuid"] == b["uuid"] == first.uuid and b["t_start"] >= a["t_end"]
    process_gap, gpu_gap = b["t_start"] - a["t_end"], b["t_gpu_first"] - a["t_gpu_last"]
    print(
        f"\nGPU idle between back-to-back jobs on {first.name}: "
        f"{gpu_gap:.2f} s from the first job's "
        "last GPU work to the next job's first "
        f"({process_gap:.2f} s from exit to the next process start)"
    )
    assert gpu_gap < 60  # a sanity bound, not a speed goal


def test_two_jobs_share_one_real_gpu_within_their_vram_budgets(chaos):
    needs_whole_gpus()
    first = detect_raw().cuda_devices[0]
    needs_visible_pids(first.uuid)  # else the worker serves no sharing job
    one_gpu = {k: v for k, v in asdict(first).items() if k != "index"}
    # packing is under test here, not the budget: served even where NVML cannot see the jobs
    chaos.start("gpu-share", capability={"cuda_devices": [one_gpu]}, FLEET_SHARE_GPU_UNWATCHED="1")
    names = ["share1", "share2"]
    ids = chaos.publish(cuda_manifest(chaos, {n: 6.0 for n in names}, SHARING))
    chaos.wait(ids, timeout_s=300)
    a, b = sorted(reports(chaos, names).values(), key=lambda r: r["t_start"])
    assert a["uuid"] == b["uuid"] == first.uuid
    assert b["t_gpu_first"] < a["t_gpu_last"], "the two sharing jobs used the GPU at the same time"
    overlap_s = a["t_gpu_last"] - b["t_gpu_first"]
    print(f"\ntwo 2 GiB sharing jobs on {first.name}: overlapped {overlap_s:.1f} s")


def test_a_sharing_job_over_its_vram_budget_is_stopped_with_the_budget_named(chaos, monkeypatch):
    needs_whole_gpus()
    from tasks.vramwatch import nested_pid_namespace, own_status

    if nested_pid_namespace(own_status()):
        pytest.skip(
            "this PID namespace hides the job's processes from NVML: no budget can be held here"
        )
    first = detect_raw().cuda_devices[0]
    needs_visible_pids(first.uuid)  # as the yield test: the watch matches NVML's pids to the job's
    one_gpu = {k: v for k, v in asdict(first).items() if k != "index"}
    chaos.start("gpu-greedy", capability={"cuda_devices": [one_gpu]}, CUDA_JOB_MIB="4096")
    ids = chaos.publish(cuda_manifest(chaos, {"greedy": 30.0}, SHARING))
    rec = chaos.wait(ids, states=("failed",), timeout_s=120)["greedy"]
    assert "over its budget of 2 GiB" in rec.last_error, rec.last_error
    assert rec.attempts == 1, "over budget is the job's own doing: not retried elsewhere"


def test_a_2_gpu_mlp_job_trains_with_ddp_across_two_real_gpus(tmp_path, monkeypatch):
    if len(detect_raw().cuda_devices) < 2 or not torch_cuda():
        pytest.skip("needs two GPUs and a CUDA build of torch")
    monkeypatch.setenv("FLEET_GPUS", "2")
    metrics = run_trainer(tmp_path, "mlp", {"epochs": 20}, visible="0,1")
    assert metrics["device"] == "cuda" and metrics["processes"] == 2
