"""The GPU suite's manifests load everywhere: their logic runs in CI though their GPUs do not."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from fleet.manifests import load
from tests.harness.gpus import SHARING, cuda_manifest


def test_back_to_back_gpu_jobs_that_differ_only_in_name_are_distinct_jobs(tmp_path):
    chaos = SimpleNamespace(root=tmp_path, tag="t")
    manifest = load(cuda_manifest(chaos, {"busy1": 3.0, "busy2": 3.0}))
    assert [j.name for j in manifest.jobs] == ["busy1", "busy2"]
    assert len({j.job_id for j in manifest.jobs}) == 2


def test_the_gpu_suites_sharing_jobs_load_as_two_budgeted_jobs_in_a_share_queue(tmp_path):
    from routing.tiers import DEFAULT_TIERS, route

    chaos = SimpleNamespace(root=tmp_path, tag="t")
    manifest = load(cuda_manifest(chaos, {"share1": 6.0, "share2": 6.0}, SHARING))
    assert {route(j, DEFAULT_TIERS, {}).queue for j in manifest.jobs} == {"cuda.share.vram2"}
    assert len({j.job_id for j in manifest.jobs}) == 2


def test_the_multi_gpu_job_loads_as_a_2_gpu_2_core_job_in_its_own_queue(tmp_path):
    import sys

    from manifest.loader import loads
    from tests.gpu import multi_gpu

    [job] = loads(
        multi_gpu.manifest(sys.executable, "pair", 2, 2, "cuda"), str(tmp_path / "m.toml")
    ).jobs
    assert (job.needs.gpus, job.needs.min_cores, job.command[-1]) == (2, 2, "cuda")


GOOD = {
    "gpus": "2",
    "visible": "GPU-a,GPU-b",
    "cores": "2",
    "affinity_env": "4,5",
    "affinity": [4, 5],
    "pid": 11,
    "pgid": 10,
    "ppid": 10,
    "parent": "python -I -S /x/tasks/supervisor.py -- python job.py",
    "grandchild_pgid": 10,
    "cuda_uuids": ["GPU-a", "GPU-b"],
}


@pytest.mark.parametrize(
    "change, problem",
    [
        ({}, None),
        ({"visible": "GPU-a"}, "expected 2 distinct GPUs"),
        ({"visible": "0,1"}, "by UUID"),
        ({"cuda_uuids": ["GPU-a"]}, "not the GPUs it was given"),
        ({"affinity": [0, 1, 4, 5]}, "expected pinned to 2 cores"),
        ({"parent": "sh -c job", "ppid": 9}, "expected tasks/supervisor.py"),
        ({"grandchild_pgid": 12}, "left its process group"),
    ],
)
def test_the_multi_gpu_check_names_what_a_job_was_given_wrong(change, problem):
    from tests.gpu import multi_gpu

    found = multi_gpu.problems({**GOOD, **change}, 2, 2, uuids={"GPU-a", "GPU-b"})
    assert found == [] if problem is None else any(problem in f for f in found), found
