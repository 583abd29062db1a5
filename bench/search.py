"""Adaptive search on a local fleet: grid, random, TPE and TPE+ASHA at one trial budget.

A real redis-server and two real workers run command jobs (bench/searchjob.py) whose loss
curve has a known optimum (0.5), on two objectives: ``early``, whose curves keep their rank
from the first epoch, and ``late`` (late bloomers), whose curves cross: the trials that end
best look worst early. Per sampler and pruner (ASHA at reduction factors 3 and 4, its first
rung at the first epoch; on the late objective also rf 3 from half the budget): the best
value reached, the total worker-seconds (each trial's record, start to end), with random (no
pruner) as the baseline measured in the same run on the same objective, and the trials
recorded pruned split by their last reported step: stopped early (before the search's last
step) or complete (ran to it: none should be); then p50/p99 of
- the advance latency: a trial's end (its record's finished_at) to the next trial issued;
- the pruning latency: the metric line a trial was pruned at to the trial recorded pruned.
Last, an advance straight against Redis (no workers) with 10 and with 1,000 finished trials.
And a job that logs per batch (bench/floodjob.py, 100,000 metric lines) run alone and as a
one-trial search with a pruner, one after the other on the same worker: its run time as a
trial against alone (the trial's pruner hears every line).

Goals: TPE+ASHA within 1% of random's best with at most 40% of random's
worker-seconds (on the early objective; the late one shows what pruning costs when early
ranks lie); advance p50 <= 200 ms at 10 and at 1,000 trials; pruning within 1 s; no trial
that ran to its last step recorded pruned; the flooding trial within 1.2x of the same job alone.

Run from the repo root: `python bench/search.py [--trials 48] [--smoke]`.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import redis  # noqa: E402

from bench.timing import parse_args  # noqa: E402
from fleet.local import start_worker, stop_worker  # noqa: E402
from fleet.manifests import loads  # noqa: E402
from fleet.redis_server import RedisServer  # noqa: E402
from state.jobrecord import JobState, job_key  # noqa: E402
from state.records import Records  # noqa: E402
from state.search import advance, trial  # noqa: E402
from state.search.store import key  # noqa: E402
from state.search.study import Mirrors  # noqa: E402
from state.search.view import read_search  # noqa: E402

JOB = ROOT / "bench" / "searchjob.py"
FLOOD_JOB = ROOT / "bench" / "floodjob.py"
HOST = {"cuda_devices": [], "ram_total_gib": 8, "cpu_cores": 2}
SPACE = "x = { low = -5.0, high = 5.0 }\ny = { low = -5.0, high = 5.0 }\n"
GRID_SPACE = (
    "x = { low = -5.0, high = 5.0, step = 1.25 }\ny = { low = -5.0, high = 5.0, step = 1.25 }\n"
)
# name -> (sampler, ASHA's reduction factor or None: no pruner, ASHA's first rung as a share
# of the epochs); random is the baseline. ASHA's first rung at the first epoch ("auto" would
# wait for one trial to complete), and on the late objective also at half the budget, from
# where its ranks are true: what the late bloomers need
RUNS = {
    "grid": ("grid", None, 0.0),
    "random": ("random", None, 0.0),
    "tpe": ("tpe", None, 0.0),
    "tpe+asha3": ("tpe", 3, 0.0),
    "tpe+asha4": ("tpe", 4, 0.0),
    "tpe+asha3/half": ("tpe", 3, 0.5),
}
OBJECTIVES = {  # the runs of each objective (bench/searchjob.py's curves)
    "early": ("grid", "random", "tpe", "tpe+asha3", "tpe+asha4"),
    "late": ("random", "tpe", "tpe+asha3", "tpe+asha4", "tpe+asha3/half"),
}


def manifest(name: str, objective: str, run: str, a) -> str:
    """A search's manifest; its pruner in the table form (Optuna's own arguments)."""
    sampler, factor, first = RUNS[run]
    pruner = '"none"'
    if factor is not None:
        rung = max(1, int(first * a.epochs))
        pruner = f'{{ name = "asha", min_resource = {rung}, reduction_factor = {factor} }}'
    command = f'["{sys.executable}", "{JOB}", "{a.pause}", "{objective}"]'
    return (
        f'[[jobs]]\nname = "{name}"\ncommand = {command}\n'
        f"hyper = {{ epochs = {a.epochs} }}\n[jobs.search]\ntrials = {a.trials}\n"
        f"parallel = {a.parallel}\n"
        f'metric = "loss"\nsampler = "{sampler}"\npruner = {pruner}\nseed = {a.seed}\n'
        f"[jobs.search.space]\n{GRID_SPACE if sampler == 'grid' else SPACE}"
    )


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))] if values else float("nan")


def run_search(client, app, root: Path, name: str, objective: str, run: str, a) -> dict:
    from fleet.publish import publish

    path = root / f"{name}.toml"
    path.write_text(manifest(name, objective, run, a))
    m = loads(path.read_text(), str(path))
    publish(app, client, m)
    sid = m.searches[0].search_id
    deadline = time.monotonic() + a.timeout
    while not (view := read_search(client, sid)).done:
        if time.monotonic() > deadline:
            raise SystemExit(f"{name}: not done after {a.timeout}s: {view.summary()}")
        time.sleep(0.2)
    got = measure(client, view, root / "lines")
    print(f"{name}: {view.summary()}", flush=True)
    return got


def measure(client, view, lines_dir: Path) -> dict:
    records = Records(client)
    recs = {t.number: records.get(t.job_id) for t in view.trials}
    heads = {
        t.number: t
        for t in trial.fetch_many(client, [(view.search_id, v.number) for v in view.trials])
        if t is not None
    }
    issued_at = {n: t.issued_at for n, t in heads.items()}
    ends = sorted(r.finished_at for r in recs.values())
    advance_s = []
    for n, at in issued_at.items():
        before = [e for e in ends if e <= at]
        if n >= view.config.parallel and before:
            advance_s.append(at - before[-1])
    prune_s, early, complete = [], 0, 0
    for t in view.trials:
        if t.state is JobState.PRUNED:
            seen = dict(line.split() for line in (lines_dir / t.job_id).read_text().splitlines())
            prune_s.append(recs[t.number].finished_at - float(seen[str(max(t.steps))]))
            last = heads[t.number].last_step
            if last < view.config.last_step:
                early += 1
            else:
                complete += 1
    return {
        "best": view.best_value,
        "worker_s": sum(r.finished_at - r.started_at for r in recs.values()),
        "pruned": view.counts[JobState.PRUNED],
        "stopped_early": early,
        "complete": complete,
        "advance_s": advance_s,
        "prune_s": prune_s,
    }


def run_flood(client, app, root: Path, lines: int, timeout: float) -> dict:
    """The flooding job alone, then as a one-trial search (median pruner: it decides on
    every batch of lines, prunes nothing): each one's run time, start to end of its record."""
    from fleet.publish import publish

    job = (
        f'[[jobs]]\nname = "{{name}}"\ncommand = ["{sys.executable}", "{FLOOD_JOB}", "{lines}"]\n'
        f'artifacts = ["out/*"]\n'
    )
    search = '[jobs.search]\ntrials = 1\nparallel = 1\nmetric = "loss"\npruner = "median"\n'
    search += "[jobs.search.space]\nx = { low = 0.0, high = 1.0 }\n"
    took = {}
    for kind, text in (("alone", job), ("trial", job + search)):
        name = f"flood-{kind}"
        m = loads(text.replace("{name}", name), str(root / f"{name}.toml"))
        rows = publish(app, client, m)
        if m.searches:
            jid = read_search(client, m.searches[0].search_id).trials[0].job_id
        else:
            jid = rows[0].job.job_id
        deadline = time.monotonic() + timeout
        records = Records(client)
        while not (rec := records.get(jid)).state.terminal:
            if time.monotonic() > deadline:
                raise SystemExit(f"{name}: not done after {timeout}s: {rec.state.value}")
            time.sleep(0.1)
        if rec.state is not JobState.SUCCEEDED:
            raise SystemExit(f"{name}: {rec.state.value}: {rec.last_error}")
        took[kind] = rec.finished_at - rec.started_at
    return took


def fill(client, sid: str, finished: int) -> None:
    """Make ``finished`` trials of search ``sid`` look finished (records, values, steps)."""
    from manifest.search.spec import trial_job_id

    pipe = client.pipeline(transaction=False)
    first = trial.fetch(client, sid, 0, ("dists",)).dists
    for n in range(1, finished):
        jid = trial_job_id(sid, n)
        x, y = (n * 0.37) % 10 - 5, (n * 0.73) % 10 - 5
        pipe.hset(
            key(sid, "trial", n),
            mapping={
                "job_id": jid,
                "params": json.dumps({"x": x, "y": y}),
                "dists": json.dumps(first),
                "sys": "{}",
                "state": JobState.SUCCEEDED.value,
                "value": 0.5 + ((x - 1) ** 2 + (y + 2) ** 2) / 10,
            },
        )
        pipe.hset(key(sid, "iv", n), mapping={s: 1.0 + s for s in range(5)})
        pipe.hset(job_key(jid), mapping={"job_id": jid, "state": JobState.SUCCEEDED.value})
    pipe.hset(key(sid), "issued", finished)
    pipe.execute()


def advance_direct(client, app, root: Path, finished: int, rounds: int) -> dict:
    """p50/p99 of one advance (end counted, next trial sampled with TPE and issued) after
    ``finished`` finished trials, Redis only; and the first (cold: the study rebuilt)."""
    from fleet.publish import publish

    text = (
        f'[[jobs]]\nname = "direct{finished}"\ncommand = ["true"]\n[jobs.search]\n'
        f'trials = {finished + rounds + 1}\nparallel = 1\nmetric = "loss"\nsampler = "tpe"\n'
        f"[jobs.search.space]\n{SPACE}"
    )
    m = loads(text, str(root / "direct.toml"))
    publish(app, client, m)
    sid = m.searches[0].search_id
    mirrors, took = Mirrors(), []
    n_running, jid = 0, trial.fetch(client, sid, 0, ("job_id",)).job_id
    fill(client, sid, finished)  # trial 0 is the one running; 1..finished-1 ended
    for _ in range(rounds):
        client.hset(key(sid, "trial", n_running), "last_value", "0.75")  # its worker heard it
        client.hset(job_key(jid), "state", JobState.SUCCEEDED.value)  # its worker recorded its end
        t0 = time.perf_counter()
        (n_running,) = advance.advance(client, sid, mirrors=mirrors)
        took.append(time.perf_counter() - t0)
        jid = trial.fetch(client, sid, n_running, ("job_id",)).job_id
    return {"cold": took[0], "p50": pct(took[1:], 0.5), "p99": pct(took[1:], 0.99)}


def ms(s: float) -> str:
    return f"{s * 1000:.0f} ms"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=48)
    ap.add_argument("--parallel", type=int, default=4)
    ap.add_argument("--epochs", type=int, default=30)
    ap.add_argument("--pause", type=float, default=0.1, help="seconds between a trial's epochs")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--timeout", type=float, default=900)
    ap.add_argument("--advance-only", action="store_true", help="only the direct advance figures")
    ap.add_argument("--flood-lines", type=int, default=100_000, help="the flooding job's lines")
    ap.add_argument("--flood-only", action="store_true", help="only the flooding job's figures")
    ap.add_argument("--objectives", nargs="+", choices=tuple(OBJECTIVES), default=tuple(OBJECTIVES))
    a = parse_args(ap, trials=6, epochs=5, pause=0.02, parallel=3, flood_lines=5_000)
    root = Path(tempfile.mkdtemp(prefix="fleet-bench-search-"))
    server = RedisServer(root / "redis").start()
    (root / "lines").mkdir()
    env = dict(
        os.environ,
        FLEET_BROKER_URL=server.url,
        FLEET_STORE_URL=(root / "store").as_uri(),
        LINES_DIR=str(root / "lines"),
    )
    os.environ.update(FLEET_BROKER_URL=server.url, FLEET_STORE_URL=env["FLEET_STORE_URL"])
    from tasks import app

    app.conf.broker_url = app.conf.result_backend = server.url
    client = redis.Redis.from_url(server.url, decode_responses=True)
    workers = []
    try:
        rounds = 5 if a.smoke else 30
        direct = {
            n: advance_direct(client, app, root, n, rounds) for n in (10, 20 if a.smoke else 1000)
        }
        for n, d in direct.items():
            print(
                f"advance, Redis only, after {n:>4} finished trials: p50 {ms(d['p50'])}, "
                f"p99 {ms(d['p99'])}, first (study rebuilt) {ms(d['cold'])}"
            )
        if a.advance_only:
            return
        workers = [start_worker(f"bench-s{i}", HOST, env, root / "logs") for i in range(2)]
        from tests.e2e.conftest import wait_for_workers

        wait_for_workers(env, [f"bench-s{i}" for i in range(2)])
        flood = run_flood(client, app, root, a.flood_lines, a.timeout)
        ratio = flood["trial"] / flood["alone"]
        print(
            f"a job printing {a.flood_lines:,} metric lines: alone {flood['alone']:.2f} s, "
            f"as a search trial {flood['trial']:.2f} s ({ratio:.2f}x); "
            f"goal <= 1.2x: {ratio <= 1.2}",
            flush=True,
        )
        if a.flood_only:
            return
        got = {
            objective: {
                run: run_search(
                    client,
                    app,
                    root,
                    f"b-{objective}-{run.replace('+', '-').replace('/', '-')}",
                    objective,
                    run,
                    a,
                )
                for run in OBJECTIVES[objective]
            }
            for objective in a.objectives
        }
        report(got, a)
    finally:
        for w in workers:
            stop_worker(w)
        server.stop()


def report(got: dict, a) -> None:
    print(
        f"\n{a.trials} trials, {a.parallel} at once, {a.epochs} epochs of {a.pause}s; optimum 0.5;"
        " pruned = stopped early + complete (ran to the last step)"
    )
    for objective, runs in got.items():
        base = runs["random"]
        print(
            f"{objective + ':':<14} {'best':>8} {'vs random':>10} "
            f"{'worker-s':>9} {'vs random':>10} {'pruned':>7} {'early':>6} {'complete':>9}"
        )
        for name, g in runs.items():
            print(
                f"{name:<14} {g['best']:>8.4f} {g['best'] / base['best'] - 1:>+10.2%} "
                f"{g['worker_s']:>9.1f} {g['worker_s'] / base['worker_s']:>10.0%} "
                f"{g['pruned']:>7} {g['stopped_early']:>6} {g['complete']:>9}"
            )
    everything = [g for runs in got.values() for g in runs.values()]
    adv = [s for g in everything for s in g["advance_s"]]
    prune = [s for g in everything for s in g["prune_s"]]
    print(
        f"advance, trial end -> next trial queued (all runs, {len(adv)}): p50 {ms(pct(adv, 0.5))}, "
        f"p99 {ms(pct(adv, 0.99))}; goal p50 <= 200 ms: {pct(adv, 0.5) <= 0.2}"
    )
    print(
        f"pruning, metric line -> trial recorded pruned ({len(prune)}): p50 {ms(pct(prune, 0.5))}, "
        f"p99 {ms(pct(prune, 0.99))}; goal max <= 1 s: {bool(prune) and max(prune) <= 1.0}"
    )
    for objective, runs in got.items():
        base = runs["random"]
        for name in (n for n in runs if "asha" in n):
            g = runs[name]
            print(
                f"goals, {objective}, {name}: worker-seconds {g['worker_s'] / base['worker_s']:.0%}"
                f" of random's (<= 40%: {g['worker_s'] <= 0.4 * base['worker_s']}); best within"
                f" 1% of random's: {g['best'] <= base['best'] * 1.01}; no complete trial"
                f" recorded pruned: {g['complete'] == 0}"
            )


if __name__ == "__main__":
    main()
