"""Population-based training on a local fleet, against the same population without PBT and
against random search with the same worker-seconds.

A real redis-server, a local store and two real workers run examples/pbt/train.py (through
bench/pbtjob.py, which notes each run's start and end): SGD on a noisy quadratic whose best
learning rate changes while it trains (high early, low late), so no fixed value reaches what
a falling schedule does. Each round (``--rounds``, 3: PBT's outcome is a draw, so one run
proves little) runs three searches, one after the other, on the same space, its own seed:
- ``population``: the same members without PBT (a random search of ``population`` trials,
  all at once): the baseline every ratio is against;
- ``pbt``: the population under PBT;
- ``random``: a random search given PBT's worker-seconds (trials = PBT's worker-seconds over
  a baseline trial's), ``population`` at once;
and last, once, ``pbt+kill``: PBT again, one worker killed with -9 just after the first exploit
and started again: the search must finish by itself, with no exploit applied twice.
The floor no fixed value can pass: the best final loss of 31 fixed learning rates on a log
grid of the space, run without fleet.
For each: the best value (the search's), its ratio to the baseline's, the worker-seconds
(every run's start to end, as the member noted them) and their ratio; for the PBT runs the
exploits, and each exploit's cost: from its decision at the boundary to the member running
again from its new checkpoint (its next run's start), p50 and p99, with the decision to the
apply (the stop, the donor's checkpoint copied) apart.

Goals: PBT's median best below the population's and random's at equal worker-seconds (and
below the fixed-lr floor), and through the kill; an exploit within a checkpoint sync plus 2 s
(p99).

Run from the repo root: `python bench/pbt.py [--population 8] [--smoke]`.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.cli import bench_fleet  # noqa: E402
from bench.search import ms, pct  # noqa: E402
from bench.timing import parse_args  # noqa: E402
from fleet.local import start_worker, stop_worker  # noqa: E402
from fleet.manifests import loads  # noqa: E402
from fleet.query import pbt as views  # noqa: E402
from state.search import pbt  # noqa: E402
from state.search.view import read_search  # noqa: E402

JOB = ROOT / "bench" / "pbtjob.py"
TRAIN = ROOT / "examples" / "pbt" / "train.py"
FIXED_GRID = 31  # learning rates on a log grid of the space for the fixed-lr floor
HOSTS = ("bench-p0", "bench-p1")
SPACE = "lr = { low = 1e-3, high = 1.0, log = true }\n"
LEASE_TTL_S = 5.0  # a killed worker's runs are handed on this soon
# an exploit's cost over its checkpoint sync; the toy's checkpoint is 2 KB in a local store,
# its sync a few ms, so the goal is checked against this alone
EXPLOIT_GOAL_S = 2.0
OPTIONS = (  # flag, kind, default, what it is
    ("--population", int, 8, "members (the baselines run as many at once)"),
    ("--last-step", int, 80, "the step a member ends at"),
    ("--interval", int, 5, "steps between boundaries"),
    ("--quantile", float, 0.25, "the scheduler's quantile (Ray's default 0.25)"),
    ("--step-s", float, 0.05, "seconds a member's step takes"),
    ("--jitter", float, 0.5, "a step takes step-s times 1 +- this"),
    ("--seed", int, 0, "the searches' seed"),
    ("--timeout", float, 300.0, "seconds a search may take"),
    ("--rounds", int, 3, "rounds of population, PBT and random, each on its own seeds"),
)


def manifest(name: str, a, *, pbt_on: bool, trials: int, seed: int) -> str:
    """A search of examples/pbt/train.py: under PBT, or a random search of ``trials``."""
    command = f'["{sys.executable}", "{JOB}"]'
    head = (
        f'[[jobs]]\nname = "{name}"\ncommand = {command}\ncheckpoint = "ckpt/"\n'
        # the run's name in its hyper: a search's id is its job's, and the four are otherwise
        # alike (the same space and seed: the baseline draws the same first values)
        f"hyper = {{ last_step = {a.last_step}, step_s = {a.step_s}, "
        f'step_jitter = {a.jitter}, run = "{name}" }}\n'
        "[jobs.search]\n"
        f'metric = "valid_loss"\ndirection = "minimize"\nsampler = "random"\nseed = {seed}\n'
        f"last_step = {a.last_step}\n"
    )
    if pbt_on:
        head += (
            f"population = {a.population}\n"
            f'scheduler = {{ name = "pbt", interval = {a.interval}, quantile = {a.quantile} }}\n'
        )
    else:
        head += f"trials = {trials}\nparallel = {a.population}\n"
    return head + f"[jobs.search.space]\n{SPACE}"


def runs_of(lines: Path) -> list[dict]:
    """A job's runs as its member noted them: ``{"start", "end", "resumed"}`` each."""
    out: list[dict] = []
    for raw in lines.read_text().splitlines() if lines.exists() else ():
        d = json.loads(raw)
        if "start" in d:
            out.append({"start": d["start"], "end": None, "resumed": d.get("resumed")})
        elif out and out[-1]["end"] is None:
            out[-1]["end"] = d["end"]
    return out


def worker_seconds(runs: list[dict]) -> float:
    # a run killed with its worker notes no end: it is counted to the next run's start
    total = 0.0
    for i, r in enumerate(runs):
        end = r["end"] or (runs[i + 1]["start"] if i + 1 < len(runs) else r["start"])
        total += max(0.0, end - r["start"])
    return total


def exploit_costs(exploits, runs_by_member: dict[int, list[dict]]) -> list[tuple[float, float]]:
    """Each exploit's (decided -> running again, decided -> applied): its member's first run
    that started after the apply, resumed from a checkpoint."""
    out = []
    for e in exploits:
        later = [
            r["start"]
            for r in runs_by_member.get(e.member, [])
            if r["start"] >= (e.applied_at or 0) and r["resumed"] is not None
        ]
        if later and e.decided_at and e.applied_at:
            out.append((min(later) - e.decided_at, e.applied_at - e.decided_at))
    return out


class Bench:
    def __init__(self, a):
        self.a = a
        self.fleet = bench_fleet("fleet-bench-pbt-", LEASE_TTL_S, decode_responses=True)
        self.lines = self.fleet.root / "lines"
        self.lines.mkdir()
        self.env = dict(self.fleet.env, LINES_DIR=str(self.lines), FLEET_CHECKPOINT_EVERY_S="0.5")
        cores = max(1, math.ceil(a.population / len(HOSTS)))
        self.host = {"cuda_devices": [], "ram_total_gib": 8, "cpu_cores": cores}
        self.workers = {}

    def start(self, name: str) -> None:
        self.workers[name] = start_worker(name, self.host, self.env, self.fleet.root / "logs")

    def stop(self) -> None:
        for w in self.workers.values():
            stop_worker(w)
        self.fleet.server.stop()

    def search(
        self, name: str, *, pbt_on: bool, trials: int = 0, kill: bool = False, seed: int = 0
    ) -> dict:
        from fleet.publish import publish
        from tasks import app

        text = manifest(name, self.a, pbt_on=pbt_on, trials=trials, seed=self.a.seed + seed)
        m = loads(text, f"{name}.toml")
        publish(app, self.fleet.client, m)
        sid, r = m.searches[0].search_id, self.fleet.client
        deadline, killed = time.monotonic() + self.a.timeout, False
        while not (view := read_search(r, sid)).done:
            if time.monotonic() > deadline:  # reported, not raised: the other runs still count
                print(f"{name}: NOT DONE after {self.a.timeout:g} s: {view.summary()}")
                break
            if kill and not killed and r.llen(pbt.key(sid, "exploits")) >= 1:
                victim = self.workers[HOSTS[0]]
                os.kill(victim.pid, signal.SIGKILL)  # its runs are handed on by their leases
                victim.wait()
                self.start(HOSTS[0])
                killed = True
            time.sleep(0.2)
        runs = {t.number: runs_of(self.lines / t.job_id) for t in view.trials}
        got = {
            "best": view.best_value if view.best_value is not None else math.nan,
            "best_trial": view.best_trial,
            "worker_s": sum(worker_seconds(rs) for rs in runs.values()),
            "trials": view.config.trials,
            "killed": killed,
            "finished": view.done,
        }
        if pbt_on:
            exploits = pbt.fetch_exploits(r, sid)
            applied = [(e.member, e.step) for e in exploits]
            decisions = [
                (k, d) for n in range(self.a.population)
                for k, d in r.hgetall(pbt.key(sid, "decided", n)).items()
            ]  # fmt: skip
            # a step's decision; beside it ``<step>:applied`` and ``<step>:void`` notes
            kinds = [json.loads(d)["kind"] for k, d in decisions if ":" not in k]
            voided = sum(k.endswith(":void") for k, _ in decisions)
            decided = kinds.count("exploit")
            members = pbt.fetch_members(r, sid, self.a.population)
            best = members[view.best_trial] if view.best_trial is not None else None
            got |= {
                "exploits": len(exploits),
                "twice": len(applied) - len(set(applied)),
                "voided": voided,
                "unapplied": decided - len(set(applied)) - voided,
                "kinds": {k: kinds.count(k) for k in ("continue", "exploit", "alone")},
                "costs": exploit_costs(exploits, runs),
                "schedule": [(s.step, s.values["lr"]) for s in best.schedule] if best else [],
                # as `fleet results` says it: the views read the records this run left
                "lineage": views.lineages(views.read(r, sid, view.config)).get(view.best_trial),
            }
        print(f"{name}: {view.summary()}", flush=True)
        return got


def fixed_best(a, points: int = FIXED_GRID) -> tuple[float, float]:
    """The best final loss any fixed lr reaches, over a log grid of the space, run without
    fleet (no pause): what no search of fixed values, however large, can beat."""
    best = (math.inf, 0.0)
    for i in range(points):
        lr = 10 ** (-3 + 3 * i / (points - 1))
        env = dict(os.environ, FLEET_HYPER=json.dumps({"lr": lr, "last_step": a.last_step}))
        env.pop("FLEET_CHECKPOINT_DIR", None)
        out = subprocess.run(
            [sys.executable, str(TRAIN)], env=env, capture_output=True, text=True, check=True
        ).stdout
        loss = json.loads(out.strip().splitlines()[-1].split(" ", 1)[1])["valid_loss"]
        best = min(best, (loss, lr))
    return best


def exploit_line(name: str, g: dict) -> str:
    cost, stop = [c for c, _ in g["costs"]], [s for _, s in g["costs"]]
    return (
        f"{name}: {g['exploits']} exploits ({g['twice']} applied twice; {g['voided']} voided: "
        f"the donor ended first; {g['unapplied']} decided, not applied; decisions: "
        + ", ".join(f"{n} {k}" for k, n in g["kinds"].items())
        + ")"
        f"{', a worker killed with -9 after the first' if g['killed'] else ''}; "
        f"decided -> running again from the new checkpoint ({len(cost)}): "
        f"p50 {ms(pct(cost, 0.5))}, p99 {ms(pct(cost, 0.99))}; of it decided -> applied "
        f"p50 {ms(pct(stop, 0.5))}, p99 {ms(pct(stop, 0.99))}"
    )


def report(rounds: list[dict], kill: dict | None, a, fixed: tuple[float, float]) -> None:
    """Each round's table against its own baseline, then the medians and the goals."""
    print(
        f"\n{a.population} members, {a.last_step} steps of {a.step_s}s (+-{a.jitter:.0%}), a "
        f"boundary every {a.interval}, quantile {a.quantile:g}, {len(rounds)} rounds (seeds "
        f"{a.seed}, {a.seed + 10}, ...); the best fixed lr ({fixed[1]:.3g}, of {FIXED_GRID} on "
        f"a log grid, run without fleet) reaches {fixed[0]:.4f}; ratios against each round's "
        "'population' (the same members without PBT)"
    )
    print(
        f"{'round':<6}{'run':<11}{'best':>8}{'vs pop':>8}{'worker-s':>9}{'vs pop':>8}{'trials':>7}"
    )
    for r, got in enumerate([*rounds, *([{"pbt+kill": kill}] if kill else [])]):
        base = (rounds[r] if r < len(rounds) else rounds[0])["population"]
        for name, g in got.items():
            print(
                f"{r:<6}{name:<11}{g['best']:>8.4f}{g['best'] / base['best']:>7.2f}x"
                f"{g['worker_s']:>9.1f}{g['worker_s'] / base['worker_s']:>7.2f}x{g['trials']:>7}"
            )
    runs = [*(got["pbt"] for got in rounds), *([kill] if kill else [])]
    pooled = {
        "exploits": sum(g["exploits"] for g in runs), "twice": sum(g["twice"] for g in runs),
        "unapplied": sum(g["unapplied"] for g in runs), "killed": False,
        "voided": sum(g["voided"] for g in runs),
        "kinds": {k: sum(g["kinds"][k] for g in runs) for k in runs[0]["kinds"]},
        "costs": [c for g in rounds for c in g["pbt"]["costs"]],
    }  # fmt: skip
    print(exploit_line("pbt, every round", pooled))
    if kill:
        print(exploit_line("pbt+kill", kill))
    best = min(runs, key=lambda g: g["best"])
    lr = ", ".join(f"{s}: {v:.3g}" for s, v in best["schedule"])
    print(f"the best PBT member's lr by step (the schedule PBT found): {lr}")
    for line in best["lineage"] or ["(it kept its own values)"]:
        print(f"  member {best['best_trial']}: {line}")
    med = {k: statistics.median(got[k]["best"] for got in rounds) for k in rounds[0]}
    wins = sum(
        got["pbt"]["best"] < min(got["population"]["best"], got["random"]["best"]) for got in rounds
    )
    share = statistics.median(got["random"]["worker_s"] / got["pbt"]["worker_s"] for got in rounds)
    p99 = pct([c for c, _ in pooled["costs"]], 0.99)
    print(
        f"median best: population {med['population']:.4f}, pbt {med['pbt']:.4f} "
        f"({med['pbt'] / med['population']:.2f}x), random {med['random']:.4f} with "
        f"{share:.0%} of PBT's worker-seconds"
    )
    print(
        f"goals: PBT's median best below the population's and random's: "
        f"{med['pbt'] < min(med['population'], med['random'])} (PBT best of the three in "
        f"{wins} of {len(rounds)} rounds); below any fixed lr's: {med['pbt'] < fixed[0]}; no "
        f"exploit applied twice: {pooled['twice'] == 0}; exploit p99 <= {EXPLOIT_GOAL_S:g} s: "
        f"{p99 <= EXPLOIT_GOAL_S}"
        + (
            f"; through the kill: finished by itself {kill['finished']}, best below the "
            f"first round's population {kill['best'] < rounds[0]['population']['best']}"
            if kill
            else ""
        )
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for flag, kind, default, what in OPTIONS:
        ap.add_argument(flag, type=kind, default=default, help=what)
    ap.add_argument("--no-kill", action="store_true", help="leave out the run with a kill -9")
    a = parse_args(
        ap,
        population=4,
        last_step=20,
        interval=5,
        step_s=0.02,
        timeout=20.0,
        no_kill=True,
        rounds=1,
    )
    b = Bench(a)
    try:
        for h in HOSTS:
            b.start(h)
        from tests.harness.workers import wait_for_workers

        wait_for_workers(b.env, list(HOSTS))
        rounds = []
        for r in range(a.rounds):
            seed = 10 * r
            got = {
                "population": b.search(
                    f"b-population-{r}", pbt_on=False, trials=a.population, seed=seed
                )
            }
            got["pbt"] = b.search(f"b-pbt-{r}", pbt_on=True, seed=seed)
            per_trial = got["population"]["worker_s"] / a.population
            trials = max(a.population, round(got["pbt"]["worker_s"] / per_trial))
            # its own draws: the population's seed would draw the baseline's values again
            got["random"] = b.search(f"b-random-{r}", pbt_on=False, trials=trials, seed=seed + 1)
            rounds.append(got)
        kill = None if a.no_kill else b.search("b-pbt-kill", pbt_on=True, kill=True)
        report(rounds, kill, a, fixed_best(a))
    finally:
        b.stop()


if __name__ == "__main__":
    main()
