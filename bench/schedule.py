"""How well fleet schedules a heterogeneous fleet, against an offline oracle.

Starts its own redis-server, a file:// store and seven real `celery -A tasks worker`
processes whose hardware is simulated with FLEET_CAPABILITY (as `fleet local` does):
one 80 GiB GPU host, two 24 GiB, two 16 GiB, and two CPU hosts, one job slot each.
For each seed it builds a workload of sleep jobs with mixed needs and durations, writes
it as a manifest the way a user would (one block per experiment, blocks in a random
order), publishes it with `fleet.publish`, waits for every job, and reads what happened
from the job records (queued, started and finished times, worker).

It compares fleet's makespan (publish to last finish) with an offline greedy list
scheduler (longest job first onto the capable host free soonest, least capable first;
bench/oracle.py) fed the same jobs: once with their nominal sleep times, once with the
times they really took on their workers (which include fleet's per-job overhead: claim,
subprocess, bundle, store), and with the capacity lower bound. It also reports
capable-idle seconds: time a host ran nothing while a job its hardware could run was
waiting. "Could run" is the hardware's answer, not the routing's: with tier-only routing
a 10 GiB job waits for a 24 GiB host while a 16 GiB host idles, and that shows here.

The workload is randomised by --seed (printed; pass it again to replay the same jobs).

With --pools it runs the multi-resource workload instead (bench/pool_workload.py): four
hosts as pools (4 GPUs and 32 cores, 2 GPUs and 16 cores, 1 GPU and 8 cores, a 64-core CPU
host), a mix of 4-, 2- and 1-GPU jobs, VRAM-sharing jobs and multi-core CPU jobs, against
the multi-resource greedy oracle (bench/pool_oracle.py) on the run times the jobs really
took, with capable-idle GPU-seconds and core-seconds.

Run from the repo root: `python bench/schedule.py [--pools] [--seed N] [--runs 3] [--jobs 30]`.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import pool_workload  # noqa: E402
from bench.oracle import Host, Job, Run, capable_hosts, capable_idle, greedy, lower_bound, makespan  # noqa: E402
from bench.pool_workload import Kind  # noqa: E402
from bench.timing import parse_args  # noqa: E402
from fleet.local import start_worker, stop_worker  # noqa: E402
from fleet.redis_server import RedisServer  # noqa: E402
from manifest.schema import Needs  # noqa: E402
from state.jobrecord import JobRecord, fetch_many  # noqa: E402

FIELDS = ("state", "worker", "queue", "queued_at", "started_at", "finished_at")

HOSTS = [
    Host("big-80", vram_gib=80, ram_gib=64, cores=16),
    Host("mid-24a", vram_gib=24, ram_gib=32, cores=8),
    Host("mid-24b", vram_gib=24, ram_gib=32, cores=8),
    Host("small-16a", vram_gib=16, ram_gib=32, cores=8),
    Host("small-16b", vram_gib=16, ram_gib=32, cores=8),
    Host("cpu-a", ram_gib=8, cores=4),
    Host("cpu-b", ram_gib=8, cores=4),
]


# Needs chosen to be routable with the default tiers both before and after need queues:
# "large" is cuda-large's floor; "v10" exceeds cuda's floor (8 GiB) but a 16 GiB host
# can run it; "ram4" is a CPU job above cpu's RAM floor (2 GiB) that a CPU host can run.
KINDS = [
    Kind("large", Needs(require_cuda=True, min_vram_gib=24, min_ram_gib=8), 1.0, (4, 9)),
    Kind("v10", Needs(require_cuda=True, min_vram_gib=10, min_ram_gib=4), 1.5, (2, 6)),
    Kind("gpu", Needs(require_cuda=True, min_vram_gib=4, min_ram_gib=2), 1.0, (2, 6)),
    Kind("ram4", Needs(min_ram_gib=4), 1.0, (1, 5)),
    Kind("cpu", Needs(min_ram_gib=1), 1.5, (1, 4)),
]


def capability(host: Host) -> dict:
    """FLEET_CAPABILITY for a simulated host (start_worker adds the hostname)."""
    devices = (
        [{"name": f"sim-{host.vram_gib:g}GB", "vram_total_gib": host.vram_gib}]
        if host.vram_gib
        else []
    )
    return {
        "cuda_devices": devices,
        "ram_total_gib": host.ram_gib,
        "ram_available_gib": host.ram_gib,
        "cpu_cores": host.cores,
    }


def workload(seed: int, n: int) -> list[tuple[str, Job]]:
    """(kind, job) in publish order: one block per kind, blocks in a seeded random order."""
    rng = random.Random(seed)
    kinds = rng.choices(KINDS, weights=[k.weight for k in KINDS], k=n)
    order = KINDS[:]
    rng.shuffle(order)
    out = []
    for kind in order:
        for i in range(sum(k is kind for k in kinds)):
            secs = round(rng.uniform(*kind.seconds), 1)
            out.append((kind.name, Job(f"{kind.name}-{i}", secs, kind.needs)))
    return out


def manifest_text(jobs: list[tuple[str, Job]], seed: int) -> str:
    blocks = []
    for i, (_, job) in enumerate(jobs):
        n = job.needs
        needs = "".join(
            f"{k} = {json.dumps(v)}\n"
            for k, v in (
                ("require_cuda", n.require_cuda),
                ("min_vram_gib", n.min_vram_gib),
                ("min_ram_gib", n.min_ram_gib),
            )
            if v
        )
        blocks.append(
            f'[[jobs]]\nname = "{job.name}"\ncommand = ["sleep", "{job.duration_s}"]\n'
            f"seed = {seed * 1000 + i}\n{needs}"
        )
    return "\n".join(blocks)


def wait_for_workers(url: str, names: list[str], timeout_s: float = 180) -> None:
    from celery import Celery

    probe = Celery("bench-probe", broker=url, backend=url)
    deadline = time.monotonic() + timeout_s
    seen: set[str] = set()
    while time.monotonic() < deadline:
        seen |= {list(r)[0].split("@")[0] for r in probe.control.ping(timeout=1.0) or []}
        if set(names) <= seen:
            return
    raise RuntimeError(
        f"workers {sorted(set(names) - seen)} did not answer ping within {timeout_s}s"
    )


def wait_for_jobs(
    client, ids: dict[str, str], label: str, timeout_s: float
) -> dict[str, JobRecord]:
    """Every job's record (by name) once all are terminal; raises unless all succeeded."""
    deadline = time.monotonic() + timeout_s
    while True:
        found = {r.job_id: r for r in fetch_many(client, ids.values(), FIELDS)}
        recs = {name: found[jid] for name, jid in ids.items() if jid in found}
        states = {name: recs[name].state.value if name in recs else "" for name in ids}
        if all(s in ("succeeded", "failed", "cancelled") for s in states.values()):
            break
        if time.monotonic() > deadline:
            raise RuntimeError(f"{label}: not done after {timeout_s}s: {states}")
        time.sleep(0.2)
    bad = {n: s for n, s in states.items() if s != "succeeded"}
    if bad:
        raise RuntimeError(f"{label}: jobs did not succeed: {bad}")
    return recs


def publish_and_wait(
    app, client, text: str, label: str, timeout_s: float
) -> tuple[float, dict[str, JobRecord]]:
    """Publish a manifest's text; the publish time and every job's record once done."""
    from fleet.manifests import loads
    from fleet.publish import publish

    manifest = loads(text, f"<{label}>")
    t0 = time.time()
    publish(app, client, manifest)
    return t0, wait_for_jobs(client, {j.name: j.job_id for j in manifest.jobs}, label, timeout_s)


def run_seed(app, client, seed: int, n: int, timeout_s: float) -> dict:
    """Publish one seed's workload on the idle fleet, wait for it, and measure it."""
    jobs = workload(seed, n)
    t0, recs = publish_and_wait(
        app, client, manifest_text(jobs, seed), f"schedule seed {seed}", timeout_s
    )
    runs = [
        Run(
            job.name,
            recs[job.name].worker,
            recs[job.name].queued_at,
            recs[job.name].started_at,
            recs[job.name].finished_at,
            capable_hosts(job.needs, HOSTS),
        )
        for _, job in jobs
    ]
    measured = [
        Job(r.job, r.finished - r.started, job.needs)
        for r, (_, job) in zip(runs, jobs, strict=True)
    ]
    nominal = [job for _, job in jobs]
    fleet_s = max(r.finished for r in runs) - t0
    return {
        "seed": seed,
        "jobs": jobs,
        "runs": runs,
        "fleet": fleet_s,
        "oracle_nominal": makespan(greedy(nominal, HOSTS)),
        "oracle": makespan(greedy(measured, HOSTS)),
        "bound": lower_bound(measured, HOSTS),
        "idle": capable_idle(runs, [h.name for h in HOSTS]),
        "queues": {name: r.queue for name, r in recs.items()},
    }


def run_pool_seed(app, client, seed: int, n: int, timeout_s: float) -> pool_workload.PoolFigures:
    """The multi-resource workload of one seed, published on the idle pool hosts and measured."""
    jobs = pool_workload.workload(seed, n)
    t0, recs = publish_and_wait(
        app, client, pool_workload.manifest_text(jobs, seed), f"pools seed {seed}", timeout_s
    )
    times = {
        name: pool_workload.Times(
            r.worker,
            r.queued_at,
            r.started_at,
            r.finished_at,
        )
        for name, r in recs.items()
    }
    fig = pool_workload.measure(seed, jobs, times, t0)
    print("\n" + "\n".join(pool_workload.report_lines(fig, jobs)))
    queues = sorted({(j.kind, recs[j.name].queue) for j in jobs})
    print("  queues: " + ", ".join(f"{k}->{q}" for k, q in queues))
    return fig


def report(m: dict) -> None:
    jobs, runs = m["jobs"], m["runs"]
    work = sum(j.duration_s for _, j in jobs)
    kinds = {}
    for kind, _ in jobs:
        kinds[kind] = kinds.get(kind, 0) + 1
    print(
        f"\nseed {m['seed']}: {len(jobs)} jobs, {work:.0f} s of sleep "
        f"({', '.join(f'{k} {v}' for k, v in kinds.items())}, in publish order)"
    )
    by_kind_queue = sorted({(k, m["queues"][j.name]) for k, j in jobs})
    print("  queues: " + ", ".join(f"{k}->{q}" for k, q in by_kind_queue))
    print(f"  {'host':10s} {'jobs':>4s} {'busy s':>7s} {'capable-idle s':>15s}  ran")
    for h in HOSTS:
        mine = [r for r in runs if r.host == h.name]
        ran = {}
        for r in mine:
            kind = r.job.rsplit("-", 1)[0]
            ran[kind] = ran.get(kind, 0) + 1
        print(
            f"  {h.name:10s} {len(mine):4d} {sum(r.finished - r.started for r in mine):7.1f} "
            f"{m['idle'][h.name]:15.1f}  "
            f"{', '.join(f'{k} {v}' for k, v in sorted(ran.items())) or '-'}"
        )
    idle = sum(m["idle"].values())
    print(
        f"  makespan: fleet {m['fleet']:.1f} s; oracle {m['oracle']:.1f} s on measured run times "
        f"({m['oracle_nominal']:.1f} s on nominal sleeps); lower bound {m['bound']:.1f} s"
    )
    print(
        f"  makespan / oracle = {m['fleet'] / m['oracle']:.2f} "
        f"(oracle / makespan = {m['oracle'] / m['fleet']:.2f}); "
        f"makespan / lower bound = {m['fleet'] / m['bound']:.2f}; capable-idle {idle:.1f} s in all"
    )


def start_fleet(root: Path, hosts: list[tuple[str, dict]]):
    """A redis-server and one worker per (name, FLEET_CAPABILITY); the server and the workers."""
    server = RedisServer(root / "redis").start()
    os.environ.update(FLEET_BROKER_URL=server.url, FLEET_STORE_URL=f"file://{root / 'store'}")
    os.environ.pop("FLEET_RESULT_BACKEND", None)
    env = dict(os.environ)
    env.pop("FLEET_CAPABILITY", None)
    started = time.monotonic()
    workers = [start_worker(name, cap, env, root / "logs") for name, cap in hosts]
    try:
        wait_for_workers(server.url, [name for name, _ in hosts])
    except BaseException:
        stop_fleet(server, workers)
        raise
    print(
        f"redis {server.url}; {len(workers)} workers answered ping after "
        f"{time.monotonic() - started:.0f} s"
    )
    return server, workers


def stop_fleet(server, workers) -> None:
    for w in workers:  # all at once: each takes a few seconds to shut down
        if w.poll() is None:
            w.send_signal(signal.SIGTERM)
    for w in workers:
        stop_worker(w)
    server.stop()


def print_summary(results: list[dict]) -> None:
    print("\nseed  makespan  oracle  bound  makespan/oracle  capable-idle s")
    for m in results:
        print(
            f"{m['seed']:<5d} {m['fleet']:8.1f} {m['oracle']:7.1f} {m['bound']:6.1f} "
            f"{m['fleet'] / m['oracle']:16.2f} {sum(m['idle'].values()):15.1f}"
        )


def runs_json(results: list, pools: bool) -> list[dict]:
    if pools:
        return [
            {
                "seed": f.seed,
                "fleet_makespan_s": f.fleet_s,
                "publish_s": f.publish_s,
                "oracle_s": f.oracle_s,
                "ratio": f.ratio,
                "capable_idle_gpu_core_s": dict(f.idle),
                "runs": [{**r.__dict__, "demand": r.demand.__dict__} for r in f.runs],
            }
            for f in results
        ]
    return [
        {
            "seed": m["seed"],
            "fleet_makespan_s": m["fleet"],
            "oracle_s": m["oracle"],
            "bound_s": m["bound"],
            "capable_idle_s": m["idle"],
            "runs": [{**r.__dict__, "capable": sorted(r.capable)} for r in m["runs"]],
        }
        for m in results
    ]


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--pools", action="store_true", help="the multi-resource hosts and workload"
    )
    parser.add_argument(
        "--seed", type=int, default=None, help="workload seed (default: random, printed)"
    )
    parser.add_argument("--runs", type=int, default=1, help="seeds SEED, SEED+1, ... on one fleet")
    parser.add_argument("--jobs", type=int, default=30)
    parser.add_argument(
        "--timeout", type=float, default=600.0, help="seconds to wait for one seed's jobs"
    )
    parser.add_argument("--runs-json", metavar="PATH", help="write every job's host and times here")
    args = parse_args(parser, jobs=4)
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1, 100_000)
    seeds = list(range(seed, seed + args.runs))
    print(
        f"seeds {seeds} (replay: python bench/schedule.py{' --pools' if args.pools else ''} "
        f"--seed {seed} --runs {args.runs} --jobs {args.jobs})"
    )
    if args.pools:
        hosts = [(h.name, pool_workload.capability(h)) for h in pool_workload.POOL_HOSTS]
        print(
            "hosts: "
            + ", ".join(
                f"{h.name} ({len(h.gpus)} GPU x {max(h.gpus, default=0):g} GiB, "
                f"{h.cores} cores, {h.ram_gib:g} GiB RAM)"
                for h in pool_workload.POOL_HOSTS
            )
        )
    else:
        hosts = [(h.name, capability(h)) for h in HOSTS]
        print(
            "hosts: "
            + ", ".join(
                f"{h.name} ({f'{h.vram_gib:g} GiB GPU' if h.vram_gib else 'CPU'}, "
                f"{h.ram_gib:g} GiB RAM)"
                for h in HOSTS
            )
        )
    run = run_pool_seed if args.pools else run_seed
    with tempfile.TemporaryDirectory(prefix="fleet-bench-schedule-") as tmp:
        server, workers = start_fleet(Path(tmp), hosts)
        try:
            import redis

            from tasks import app

            app.conf.broker_url = app.conf.result_backend = server.url
            app.pool.force_close_all()
            client = redis.Redis.from_url(server.url)
            results = []
            for s in seeds:
                results.append(run(app, client, s, args.jobs, args.timeout))
                if not args.pools:
                    report(results[-1])
        finally:
            stop_fleet(server, workers)
    if args.runs_json:
        Path(args.runs_json).write_text(json.dumps(runs_json(results, args.pools), indent=1))
    if len(results) > 1:
        if args.pools:
            print("\n" + "\n".join(pool_workload.summary_lines(results)))
        else:
            print_summary(results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
