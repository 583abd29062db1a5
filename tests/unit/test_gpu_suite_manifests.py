"""The GPU suite's manifests load everywhere: their logic runs in CI though their GPUs do not."""
from __future__ import annotations

from types import SimpleNamespace

from fleet.manifests import load
from tests.gpu.test_gpu import cuda_manifest


def test_back_to_back_gpu_jobs_that_differ_only_in_name_are_distinct_jobs(tmp_path):
    chaos = SimpleNamespace(root=tmp_path, tag="t")
    manifest = load(cuda_manifest(chaos, {"busy1": 3.0, "busy2": 3.0}))
    assert [j.name for j in manifest.jobs] == ["busy1", "busy2"]
    assert len({j.job_id for j in manifest.jobs}) == 2


def test_the_gpu_suites_sharing_jobs_load_as_two_budgeted_jobs_in_a_share_queue(tmp_path):
    from routing.tiers import DEFAULT_TIERS, route
    from tests.gpu.test_gpu import SHARING
    chaos = SimpleNamespace(root=tmp_path, tag="t")
    manifest = load(cuda_manifest(chaos, {"share1": 6.0, "share2": 6.0}, SHARING))
    assert {route(j, DEFAULT_TIERS, {}).queue for j in manifest.jobs} == {"cuda.share.vram2"}
    assert len({j.job_id for j in manifest.jobs}) == 2
