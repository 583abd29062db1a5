"""A ``nodes = 2`` gang over NCCL on real GPUs: two real workers on one machine, each
declaring one of its GPUs (by UUID) as if it were a host of its own, so the gang's two
members meet through torch.distributed over NCCL, one GPU each.

Skipped, with the reason, on a host with fewer than two GPUs or a CPU build of torch. The
same path over gloo on CPU runs in CI (tests/e2e/test_gangs.py).
"""

from __future__ import annotations

import json
import sys

import pytest

from routing.detect import detect_raw
from state.jobrecord import JobState
from tests.harness.gpus import TOO_FEW, needs_whole_gpus, torch_cuda

JOB = __import__("pathlib").Path(__file__).parents[1] / "e2e" / "gangjob.py"
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(TOO_FEW is not None, reason=TOO_FEW or "")]


def test_a_two_node_gang_meets_over_nccl_with_one_gpu_per_member(chaos):
    if not torch_cuda():
        pytest.skip("torch here is a CPU build: scripts/test-gpu installs the CUDA one")
    needs_whole_gpus()
    devices = detect_raw().cuda_devices[:2]
    for i, d in enumerate(devices):
        one = {"name": d.name, "vram_total_gib": d.vram_total_gib, "uuid": d.uuid}
        chaos.start(f"gpu-node{i}", capability={"cuda_devices": [one]})
    path = chaos.root / "gang.toml"
    path.write_text(
        f'[[jobs]]\nname = "nccl-pair"\ncommand = ["{sys.executable}", "{JOB}", "2", "nccl"]\n'
        "nodes = 2\nrequire_cuda = true\n"
    )
    rec = chaos.wait(chaos.publish(path), timeout_s=300)["nccl-pair"]
    assert rec.state is JobState.SUCCEEDED, chaos.logs()
    seen = [json.loads(p.read_text()) for p in chaos.counts.glob("nccl-pair-rank*.json")]
    done = [r for r in seen if "sum" in r]
    assert sorted(r["rank"] for r in done) == [0, 1]
    assert all(r["sum"] == 3.0 and r["backend"] == "nccl" for r in done)
    # each member saw exactly its own GPU
    assert {r["visible"] for r in done} == {d.uuid for d in devices}
