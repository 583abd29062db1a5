"""Hosts as resource pools, with real workers on simulated hardware: jobs that fit start
together, GPU jobs never wait behind CPU jobs on a GPU host, a 2-GPU job never lands on a
1-GPU host, and sharing jobs share one GPU by VRAM budget."""

from __future__ import annotations

import json
import sys
import time

import pytest
import redis

from fleet.query.hosts import read_hosts
from state.jobrecord import JobState
from tests.harness.cli import fleet_cli
from tests.harness.pools import FOUR_GPU, JOB, ONE_GPU
from tests.harness.workers import client_app
from tests.waiting import wait_until

pytestmark = pytest.mark.e2e


def job(name: str, seconds: float, needs: str, seed: int = 0) -> str:
    return (
        f'[[jobs]]\nname = "{name}"\ncommand = ["{sys.executable}", "{JOB}", "{seconds}"]\n'
        f"seed = {seed}\n{needs}\n"
    )


def test_a_4_gpu_16_core_host_starts_a_2_gpu_job_two_1_gpu_jobs_and_six_cpu_jobs_together(pools):
    pools.start("quad", FOUR_GPU)
    text = job("ddp", 6, "gpus = 2\nmin_vram_gib = 16")
    text += "".join(job(f"one{i}", 6, "require_cuda = true", seed=i) for i in range(2))
    text += "".join(job(f"cpu{i}", 6, "min_cores = 2", seed=i) for i in range(6))
    ids = pools.publish(text)
    recs = pools.wait(ids)
    assert all(r.state is JobState.SUCCEEDED for r in recs.values()), pools.logs()
    seen = pools.reports(ids)
    starts = [r["start"] for r in seen.values()]
    assert max(starts) - min(starts) < 5, f"not all started together: {sorted(starts)}"
    ddp = seen["ddp"]
    assert ddp["gpus"] == "2" and len(set(ddp["visible"].split(","))) == 2
    gpus = [g for n in ("ddp", "one0", "one1") for g in seen[n]["visible"].split(",")]
    assert len(gpus) == len(set(gpus)) == 4  # no GPU handed out twice
    assert all(seen[f"cpu{i}"]["cores"] == "2" == seen[f"cpu{i}"]["omp"] for i in range(6))
    assert all(seen[f"cpu{i}"]["gpus"] == "0" for i in range(6))
    # what `fleet usage` counts: the record names the cores and GPUs each run held
    assert all(recs[f"cpu{i}"].cores == 2 and not recs[f"cpu{i}"].gpu for i in range(6))
    assert recs["ddp"].cores and len(recs["ddp"].gpu.split(",")) == 2


def pool_jobs(pools, host: str) -> set[str]:
    """The jobs ``fleet hosts --json`` shows holding a part of ``host``'s pool."""
    hosts = json.loads(fleet_cli(pools.env, "hosts", "--json", timeout_s=60, ok=True).stdout)
    hosts = hosts["hosts"] if isinstance(hosts, dict) else hosts
    view = next(h for h in hosts if h["hostname"] == host)
    return set((view.get("pool") or {}).get("jobs") or {})


def read_pool_jobs(client: redis.Redis, host: str) -> set[str]:
    """The same as ``pool_jobs``, read in this process by the reader the CLI uses: fast enough to
    time a sub-second change on a loaded machine, where starting the CLI takes a second."""
    view = next(v for v in read_hosts(client) if v.hostname == host)
    return set((view.pool or {}).get("jobs") or {})


def test_fleet_hosts_shows_a_job_taking_and_leaving_a_gpu_within_a_second_not_a_heartbeat(pools):
    # a host rewrites its heartbeat every HOST_HEARTBEAT_EVERY_S (5 s): a change seen within
    # 1.5 s came with the job, not with the next heartbeat
    pools.start("gpu1", ONE_GPU)
    client = redis.Redis.from_url(pools.env["FLEET_BROKER_URL"], decode_responses=True)
    ids = pools.publish(job("blink", 5, "require_cuda = true"))
    blink = ids["blink"]
    wait_until(
        "the pool holds the job",
        lambda: blink in read_pool_jobs(client, "gpu1"),
        30,
        pools.logs,
        every_s=0.02,
    )
    seen_at = time.time()
    started = pools.records().get(blink).started_at
    assert seen_at - started < 1.5, "the pool showed the job a heartbeat late"
    assert blink in pool_jobs(pools, "gpu1"), "fleet hosts does not show the job the pool holds"
    pools.wait(ids)
    finished = pools.records().get(blink).finished_at
    wait_until(
        "the pool lets the job go",
        lambda: blink not in read_pool_jobs(client, "gpu1"),
        30,
        pools.logs,
        every_s=0.02,
    )
    assert time.time() - finished < 1.5, "the pool showed the GPU held a heartbeat after the job"
    assert blink not in pool_jobs(pools, "gpu1"), "fleet hosts still shows the job in the pool"


def test_gpu_jobs_start_at_once_on_a_gpu_host_already_full_of_cpu_jobs(pools):
    pools.start("gpu1", ONE_GPU)
    pools.publish("".join(job(f"busy{i}", 20, "min_cores = 1", seed=i) for i in range(12)))

    def running() -> int:
        return sum(r.state is JobState.RUNNING for r in pools.records().all())

    # the CPU jobs take every core they may, all at once: an eighth would start with them
    assert wait_until("CPU jobs fill the host", lambda: running() >= 7, 60, pools.logs)
    assert running() == 7, "one core stays kept for the idle GPU"
    gpu = pools.publish(job("urgent-gpu", 1, "require_cuda = true"))
    t0 = time.time()
    recs = pools.wait(gpu, timeout_s=60)
    assert recs["urgent-gpu"].state is JobState.SUCCEEDED
    assert pools.reports(["urgent-gpu"])["urgent-gpu"]["start"] - t0 < 8, (
        "the GPU job waited behind CPU jobs"
    )


def test_a_2_gpu_job_never_lands_on_a_1_gpu_host(pools):
    pools.start("gpu1", ONE_GPU)
    ids = pools.publish(job("pair", 1, "gpus = 2"))
    # the 1-GPU host does not listen on the 2-GPU queue, so the job waits there: shown by the
    # host's subscriptions, not by a sleep that hopes nothing happens
    inspect = client_app(pools.env["FLEET_BROKER_URL"]).control.inspect(timeout=5)
    [listened] = [[q["name"] for q in qs] for qs in (inspect.active_queues() or {}).values()]
    assert "cuda" in listened and "cuda.gpus2" not in listened, listened
    rec = {r.name: r for r in pools.records().all()}["pair"]
    assert rec.state is JobState.QUEUED and rec.queue == "cuda.gpus2"
    pools.start("quad", FOUR_GPU)
    recs = pools.wait(ids)
    assert recs["pair"].worker == "quad" and recs["pair"].state is JobState.SUCCEEDED


def test_sharing_jobs_run_together_on_one_gpu_while_their_budgets_fit(pools):
    pools.start("gpu1", ONE_GPU)
    text = "".join(
        job(f"share{i}", 5, "require_cuda = true\nshare_gpu = true\nmin_vram_gib = 30", seed=i)
        for i in range(3)
    )
    ids = pools.publish(text)
    recs = pools.wait(ids)
    assert all(r.state is JobState.SUCCEEDED for r in recs.values())
    seen = sorted(pools.reports(ids).values(), key=lambda r: r["start"])
    assert all(r["budget"] == "30" and r["gpus"] == "1" for r in seen)
    assert seen[1]["start"] < seen[0]["end"], "two 30 GiB budgets fit one 80 GiB GPU together"
    assert seen[2]["start"] >= min(seen[0]["end"], seen[1]["end"]) - 0.5, (
        "a third does not fit beside them"
    )


def test_a_2_gpu_job_gets_two_gpus_and_its_pinned_cores_and_runs_under_its_supervisor(pools):
    # the GPU suite's multi-GPU check (tests/gpu/test_multi_gpu.py) on simulated GPUs
    from tests.gpu import multi_gpu

    pools.start("quad", FOUR_GPU)
    ids = pools.publish(multi_gpu.manifest(sys.executable, "pair", 2, 2))
    assert pools.wait(ids)["pair"].state is JobState.SUCCEEDED, pools.logs()
    assert multi_gpu.problems(pools.reports(["pair"])["pair"], gpus=2, cores=2) == []
