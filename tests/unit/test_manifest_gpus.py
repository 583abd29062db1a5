"""Multi-GPU and GPU-sharing jobs in a manifest: gpus, share_gpu, their checks and queues."""

from __future__ import annotations

import pytest

from routing.tiers import DEFAULT_TIERS, route
from tests.unit.manifest_cases import COMMAND, job_of, only_problem


def queue_of(job) -> str:
    return route(job, DEFAULT_TIERS, {}).queue


def test_a_job_asking_for_two_gpus_is_a_cuda_job_in_a_gpus2_queue(tmp_path):
    job = job_of(tmp_path, COMMAND + "gpus = 2\nmin_vram_gib = 24\n")
    assert job.needs.require_cuda and job.needs.gpu_count == 2
    assert queue_of(job) == "cuda.gpus2.vram24"


def test_a_cuda_job_that_says_nothing_takes_one_gpu_on_its_tier_queue(tmp_path):
    job = job_of(tmp_path, COMMAND + "require_cuda = true\n")
    assert job.needs.gpu_count == 1 and queue_of(job) == "cuda"


def test_a_sharing_job_waits_in_a_queue_of_its_own_with_its_budget(tmp_path):
    job = job_of(tmp_path, COMMAND + "require_cuda = true\nshare_gpu = true\nmin_vram_gib = 2\n")
    assert queue_of(job) == "cuda.share.vram2"


def test_the_same_job_with_gpus_1_written_out_keeps_its_id(tmp_path):
    one = job_of(tmp_path, COMMAND + "require_cuda = true\n", "a.toml")
    explicit = job_of(tmp_path, COMMAND + "require_cuda = true\ngpus = 1\n", "b.toml")
    two = job_of(tmp_path, COMMAND + "require_cuda = true\ngpus = 2\n", "c.toml")
    assert one.job_id == explicit.job_id != two.job_id


@pytest.mark.parametrize(
    "extra, key, words",
    [
        (
            "prefer_cuda = true\nshare_gpu = true\nmin_vram_gib = 2\n",
            "share_gpu",
            "without require_cuda",
        ),
        ("require_cuda = true\nshare_gpu = true\n", "share_gpu", "needs a VRAM budget"),
        (
            "require_cuda = true\nshare_gpu = true\nmin_vram_gib = 2\ngpus = 2\n",
            "gpus",
            "shares one GPU",
        ),
        ("require_cuda = true\ngpus = 65\n", "gpus", "above 64 GPUs on one host"),
        ("require_cuda = true\ngpus = -1\n", "gpus", ">= 0"),
    ],
)
def test_impossible_gpu_asks_are_manifest_errors_at_their_key(tmp_path, extra, key, words):
    problem = only_problem(tmp_path, COMMAND + extra)
    assert problem.field.endswith(key) and words in problem.message
