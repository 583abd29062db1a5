"""Feasibility at publish, pure: which queues no live host could serve, and what to say."""

from fleet.feasibility import annotate, infeasible, messages
from fleet.manifests import loads
from fleet.publish import plan
from routing.capability import Capability, CudaDevice
from routing.explain import HostFacts


def host(name, vram=(), ram=32.0, asked=()):
    return HostFacts(
        Capability(name, 8, ram, ram, tuple(CudaDevice(i, "g", v, v) for i, v in enumerate(vram))),
        None,
        asked,
    )


def job(name, needs="", seed=0):
    return f'[[jobs]]\nname = "{name}"\ncommand = ["true"]\nseed = {seed}\n{needs}\n'


HOSTS = [host("gpu16", vram=[16]), host("cpu8", ram=8)]


def test_only_queues_no_live_host_could_serve_are_reported_once_each_with_the_nearest_host():
    m = loads(
        job("a", "require_cuda = true\nmin_vram_gib = 40")
        + job("b", "require_cuda = true\nmin_vram_gib = 40", 1)
        + job("c", "require_cuda = true\nmin_vram_gib = 10", 2)
        + job("d", seed=3),
        "m.toml",
    )
    [w] = infeasible(plan(m, {}), m, HOSTS)
    assert (w.queue, w.jobs, w.nearest.hostname) == ("cuda.vram40", ("a", "b"), "gpu16")
    assert messages([w]) == [
        "no live worker can run 2 job(s) in queue cuda.vram40 (a, b); "
        "nearest host gpu16: VRAM 16 < 40 GiB (largest device). "
        "Queued anyway: they start when such a host joins"
    ]


def test_a_prefer_cuda_job_that_can_fall_back_to_a_live_cpu_host_is_not_reported():
    m = loads(job("p", "prefer_cuda = true\nmin_vram_gib = 40"), "m.toml")
    assert infeasible(plan(m, {}), m, HOSTS) == []


def test_a_host_started_with_q_for_another_tier_does_not_count():
    m = loads(job("g", "require_cuda = true"), "m.toml")
    [w] = infeasible(plan(m, {}), m, [host("gpu16", vram=[16], asked=("cpu",))])
    assert w.nearest.reasons == ("started with -Q cpu",)


def test_with_no_live_worker_at_all_one_line_says_so():
    m = loads(job("a") + job("b", "require_cuda = true", 1), "m.toml")
    warnings = infeasible(plan(m, {}), m, [])
    assert len(warnings) == 2 and len(messages(warnings)) == 1
    assert messages(warnings)[0].startswith(
        "no live workers (no worker heartbeat in Redis): the 2 job(s)"
    )


def test_json_rows_of_stuck_jobs_carry_the_queue_the_nearest_host_and_its_shortfall():
    m = loads(job("a", "min_cores = 64") + job("b", seed=1), "m.toml")
    rows = plan(m, {})
    out = annotate([r.to_dict() for r in rows], infeasible(rows, m, HOSTS))
    assert (
        out[0]["infeasible"]
        == {
            "queue": "cpu.cores64",
            "jobs": 1,
            "nearest_host": "cpu8",
            "shortfall": ["cores 8 < 64"],
        }
        and "infeasible" not in out[1]
    )


def test_a_dry_run_says_publishing_would_queue_them_not_that_they_were_queued():
    m = loads(job("a", "require_cuda = true\nmin_vram_gib = 40"), "m.toml")
    [w] = infeasible(plan(m, {}), m, HOSTS)
    [line] = messages([w], dry_run=True)
    assert "Queued anyway" not in line and line.endswith(
        "Publishing would queue them anyway: they start when such a host joins"
    )
    [none_live] = messages(infeasible(plan(m, {}), m, []), dry_run=True)
    assert "would wait, once published," in none_live


def test_a_multi_gpu_job_no_live_host_has_enough_gpus_for_is_told_so_with_the_most_any_has():
    hosts = HOSTS + [host("big2", vram=[80, 80])]
    m = loads(job("ddp", "require_cuda = true\ngpus = 4\nmin_vram_gib = 24"), "m.toml")
    [w] = infeasible(plan(m, {}), m, hosts)
    assert messages([w]) == [
        f"no live worker can run 1 job(s) in queue {w.queue} (ddp); "
        "no live host has 4 GPUs with >= 24 GiB (most: 2 on big2). "
        "Queued anyway: they start when such a host joins"
    ]
    assert w.to_dict() == {
        "queue": w.queue,
        "jobs": 1,
        "nearest_host": "big2",
        "shortfall": ["GPUs 2 < 4 (>= 24 GiB each)"],
        "no_live_host_has": "no live host has 4 GPUs with >= 24 GiB (most: 2 on big2)",
    }


def test_a_2_gpu_job_a_live_host_can_run_is_not_reported():
    m = loads(job("ddp", "require_cuda = true\ngpus = 2\nmin_vram_gib = 24"), "m.toml")
    assert infeasible(plan(m, {}), m, HOSTS + [host("big2", vram=[80, 80])]) == []
