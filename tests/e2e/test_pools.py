"""Hosts as resource pools, with real workers on simulated hardware: jobs that fit start
together, GPU jobs never wait behind CPU jobs on a GPU host, a 2-GPU job never lands on a
1-GPU host, and sharing jobs share one GPU by VRAM budget."""

from __future__ import annotations

import json
import sys
import threading

import pytest
import redis

from core.constants import HOST_HEARTBEAT_EVERY_S, HOST_POOL_REWRITE_S
from fleet.query.hosts import read_hosts
from state.jobrecord import JobState
from tests.harness.cli import fleet_cli
from tests.harness.pools import FOUR_GPU, JOB, ONE_GPU
from tests.harness.workers import client_app
from tests.waiting import wait_until

pytestmark = pytest.mark.e2e
# a change shown within this of its record's time came with the change: the pool's rewrite
# limit, and a second for a run's own steps between its record and its pool on a loaded box
AT_ONCE_S = HOST_POOL_REWRITE_S + 1.0


def job(name: str, seconds: float | str, needs: str, seed: int = 0) -> str:
    """A pooljob.py job of ``seconds``, or held until a file exists (``until:PATH``)."""
    return (
        f'[[jobs]]\nname = "{name}"\ncommand = ["{sys.executable}", "{JOB}", "{seconds}"]\n'
        f"seed = {seed}\n{needs}\n"
    )


def running(pools) -> set[str]:
    """The names of the jobs running now."""
    return {r.name for r in pools.records().all() if r.state is JobState.RUNNING}


def test_a_4_gpu_16_core_host_starts_a_2_gpu_job_two_1_gpu_jobs_and_six_cpu_jobs_together(
    pools, tmp_path
):
    # every job holds until all of them were seen running at once: together by a condition,
    # not by start times within a window
    pools.start("quad", FOUR_GPU)
    until = f"until:{tmp_path / 'gate'}"
    text = job("ddp", until, "gpus = 2\nmin_vram_gib = 16")
    text += "".join(job(f"one{i}", until, "require_cuda = true", seed=i) for i in range(2))
    text += "".join(job(f"cpu{i}", until, "min_cores = 2", seed=i) for i in range(6))
    ids = pools.publish(text)
    wait_until("all nine run together", lambda: running(pools) == set(ids), 90, pools.logs)
    (tmp_path / "gate").touch()
    recs = pools.wait(ids)
    assert all(r.state is JobState.SUCCEEDED for r in recs.values()), pools.logs()
    seen = pools.reports(ids)
    ddp = seen["ddp"]
    assert ddp["gpus"] == "2" and len(set(ddp["visible"].split(","))) == 2
    gpus = [g for n in ("ddp", "one0", "one1") for g in seen[n]["visible"].split(",")]
    assert len(gpus) == len(set(gpus)) == 4  # no GPU handed out twice
    assert all(seen[f"cpu{i}"]["cores"] == "2" == seen[f"cpu{i}"]["omp"] for i in range(6))
    assert all(seen[f"cpu{i}"]["gpus"] == "0" for i in range(6))
    # what `fleet usage` counts: the record names the cores and GPUs each run held
    held = {i: (recs[f"cpu{i}"].cores, recs[f"cpu{i}"].gpu) for i in range(6)}
    assert all(c == 2 and not g for c, g in held.values()), held
    assert recs["ddp"].cores and len(recs["ddp"].gpu.split(",")) == 2


def pool_jobs(pools, host: str) -> set[str]:
    """The jobs ``fleet hosts --json`` shows holding a part of ``host``'s pool."""
    hosts = json.loads(fleet_cli(pools.env, "hosts", "--json", ok=True).stdout)
    hosts = hosts["hosts"] if isinstance(hosts, dict) else hosts
    view = next(h for h in hosts if h["hostname"] == host)
    return set((view.get("pool") or {}).get("jobs") or {})


def pool_body(client: redis.Redis, host: str) -> tuple[float, set[str]]:
    """When ``host`` wrote its heartbeat body, and the jobs its pool holds in it: read in this
    process by the reader the CLI uses, fast enough to see each body a host writes."""
    view = next(v for v in read_hosts(client) if v.hostname == host)
    return view.seen_at, set((view.pool or {}).get("jobs") or {})


def gap_to_change(client: redis.Redis, host: str, act, changed, logs) -> tuple[float, float]:
    """Do ``act()``, then the seconds between the first heartbeat body of ``host`` whose pool's
    jobs satisfy ``changed`` and the body before it, and when that body was written. A body
    written on schedule comes HOST_HEARTBEAT_EVERY_S after the one before; one written for a
    change, sooner. Both times are the worker's own, so how late this process looks does not
    count."""
    before = [pool_body(client, host)]  # read before the change can happen
    act()

    def look():
        now = pool_body(client, host)
        if changed(now[1]):
            return (now[0] - before[-1][0], now[0])  # a tuple: a gap of 0.0 is an answer too
        before.append(now)
        return None

    return wait_until("the pool changes", look, 60, logs, every_s=0.02)


def at_once(gap: float, written: float, event: float) -> bool:
    """Whether a body showing a change came with it, not on schedule: sooner than a heartbeat
    after the body before it; or, when the change came at the end of a beat (a scheduled body
    would show it as soon), within AT_ONCE_S of the change by the record's own time."""
    return gap < HOST_HEARTBEAT_EVERY_S or written - event < AT_ONCE_S


def test_fleet_hosts_shows_a_job_taking_and_leaving_a_gpu_at_once_not_a_heartbeat_later(
    pools, tmp_path
):
    # a host rewrites its heartbeat every HOST_HEARTBEAT_EVERY_S: the body that first shows
    # the job (then its end) came sooner after the one before it, so with the job, not on
    # schedule; the job holds until the test has seen it in `fleet hosts`
    pools.start("gpu1", ONE_GPU)
    client = redis.Redis.from_url(pools.env["FLEET_BROKER_URL"], decode_responses=True)
    gate, ids = tmp_path / "gate", {}
    # published beside the watch, which sees every body the host writes meanwhile
    blink_job = job("blink", f"until:{gate}", "require_cuda = true")
    publish = threading.Thread(target=lambda: ids.update(pools.publish(blink_job)))
    gap, written = gap_to_change(client, "gpu1", publish.start, bool, pools.logs)  # its only job
    publish.join()
    blink = ids["blink"]
    claimed = pools.records().get(blink).started_at
    assert at_once(gap, written, claimed), (
        f"the pool showed the job a heartbeat late ({gap:.2f}s after the body before, "
        f"{written - claimed:.2f}s after its claim)"
    )
    assert blink in pool_jobs(pools, "gpu1"), "fleet hosts does not show the job the pool holds"
    gap, written = gap_to_change(
        client, "gpu1", gate.touch, lambda jobs: blink not in jobs, pools.logs
    )
    assert pools.wait(ids)["blink"].state is JobState.SUCCEEDED, pools.logs()
    ended = pools.records().get(blink).finished_at
    assert at_once(gap, written, ended), (
        f"the pool let the job go a heartbeat late ({gap:.2f}s after the body before, "
        f"{written - ended:.2f}s after its end)"
    )
    assert blink not in pool_jobs(pools, "gpu1"), "fleet hosts still shows the job in the pool"


def test_gpu_jobs_start_at_once_on_a_gpu_host_already_full_of_cpu_jobs(pools, tmp_path):
    # the CPU jobs hold until the GPU job has ended: it cannot have waited behind them
    pools.start("gpu1", ONE_GPU)
    gate = tmp_path / "gate"
    busy = "".join(job(f"busy{i}", f"until:{gate}", "min_cores = 1", seed=i) for i in range(12))
    pools.publish(busy)

    # the CPU jobs take every core they may, all at once: an eighth would start with them
    assert wait_until("CPU jobs fill the host", lambda: len(running(pools)) >= 7, 60, pools.logs)
    assert len(running(pools)) == 7, "one core stays kept for the idle GPU"
    gpu = pools.publish(job("urgent-gpu", 1, "require_cuda = true"))
    recs = pools.wait(gpu, timeout_s=60)
    assert recs["urgent-gpu"].state is JobState.SUCCEEDED
    assert len(running(pools)) == 7, "the GPU job ran while the CPU jobs held every core"
    gate.touch()


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


def test_sharing_jobs_run_together_on_one_gpu_while_their_budgets_fit(pools, tmp_path):
    # all three hold until two were seen running together
    pools.start("gpu1", ONE_GPU)
    needs, gate = "require_cuda = true\nshare_gpu = true\nmin_vram_gib = 30", tmp_path / "gate"
    text = "".join(job(f"share{i}", f"until:{gate}", needs, seed=i) for i in range(3))
    ids = pools.publish(text)
    two = lambda: len(running(pools)) >= 2  # noqa: E731
    wait_until("two 30 GiB budgets fit one 80 GiB GPU together", two, 60, pools.logs)
    gate.touch()
    recs = pools.wait(ids)
    assert all(r.state is JobState.SUCCEEDED for r in recs.values())
    seen = sorted(pools.reports(ids).values(), key=lambda r: r["start"])
    assert all(r["budget"] == "30" and r["gpus"] == "1" for r in seen)
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
