"""What a gang (``nodes = 2``) costs: time to start, and nothing on the data path.

Two real workers on simulated one-core hosts (loopback) and a real redis-server. Figures:

- publish -> all started, idle hosts: from `fleet publish` returning to the later of the
  two members' process starts (formation: a seat each, the claim, the launch);
- publish -> all started, busy hosts: the same with each host running a stream of short jobs
  (0.5 s) queued before the gang;
- all_reduce loop: ITERATIONS all_reduce calls of NUMEL floats, timed inside the processes
  between two barriers, under fleet (one member per host) and under plain torchrun with the
  same two processes on this machine, placed alike (the simulated hosts both pin their job
  to their first CORES cores with as many threads: torchrun's run under `taskset -c
  0-(CORES-1)`, OMP_NUM_THREADS=CORES);
  the ratio fleet / torchrun should be ~1.0: fleet sets the variables and steps aside.

Run from the repo root: `python bench/gang.py [--rounds 3] [--iterations 2000]`.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import redis  # noqa: E402

from bench.cli import local_env, publish  # noqa: E402
from bench.timing import parse_args  # noqa: E402
from fleet.local import start_worker, stop_worker  # noqa: E402
from fleet.redis_server import RedisServer  # noqa: E402
from state.jobrecord import JobState  # noqa: E402
from state.records import Records  # noqa: E402

LOOP = ROOT / "bench" / "gangloop.py"
SLEEPY = ROOT / "tests" / "e2e" / "sleepy.py"


def host(cores: int) -> dict:
    return {"cuda_devices": [], "ram_total_gib": 8, "cpu_cores": cores}


HOSTS = ("bench-a", "bench-b")


def gang(name: str, args, seed: int) -> str:
    return (
        f'[[jobs]]\nname = "{name}"\n'
        f'command = ["{sys.executable}", "{LOOP}", "{args.iterations}", "{args.numel}"]\n'
        f"nodes = 2\nseed = {seed}\nmin_cores = {args.cores}\n"
    )


def small(name: str, seed: int) -> str:
    return (
        f'[[jobs]]\nname = "{name}"\ncommand = ["{sys.executable}", "{SLEEPY}", "0.5"]\n'
        f"seed = {seed}\n"
    )


def wait_done(records: Records, ids: dict[str, str], timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        states = records.states(ids.values())
        if all(s is not None and s.terminal for s in states.values()):
            bad = {n: states[j] for n, j in ids.items() if states[j] is not JobState.SUCCEEDED}
            if bad:
                raise SystemExit(f"bench: jobs did not succeed: {bad}")
            return
        time.sleep(0.05)
    raise SystemExit(f"bench: jobs not finished in {timeout_s}s: {records.states(ids.values())}")


def reports(env: dict, name: str) -> list[dict]:
    counts = Path(env["COUNT_DIR"])
    return [json.loads(p.read_text()) for p in sorted(counts.glob(f"{name}-rank*.json"))]


def one_gang(env, root, records, name, args, seed, busy: int = 0) -> dict:
    text = "".join(small(f"{name}-s{i}", seed * 100 + i) for i in range(busy))
    ids = publish(env, root, text + gang(name, args, seed))
    wait_done(records, ids)
    seen = reports(env, name)
    published = records.get(ids[name]).created_at  # its record, written by the publish
    return {
        "start": max(r["started"] for r in seen) - published,
        "loop": max(r["loop_s"] for r in seen),
    }


def torchrun_loop(env: dict, args) -> float:
    """The same loop under plain torchrun, each process placed as fleet places a member on
    these simulated hosts (both hosts' first ``cores`` cores, as many threads)."""
    subprocess.run(
        [
            "taskset",
            "-c",
            f"0-{args.cores - 1}",
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc_per_node=2",
            str(LOOP),
            str(args.iterations),
            str(args.numel),
        ],
        env=dict(env, OMP_NUM_THREADS=str(args.cores)),
        capture_output=True,
        timeout=300,
        check=True,
    )
    return max(r["loop_s"] for r in reports(env, "torchrun"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--iterations", type=int, default=2000)
    ap.add_argument("--numel", type=int, default=65536)
    ap.add_argument("--busy", type=int, default=6, help="short jobs queued before the gang")
    ap.add_argument("--cores", type=int, default=2, help="each simulated host's cores")
    args = parse_args(ap, rounds=1, iterations=50, numel=1024, busy=2)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "counts").mkdir()
        server = RedisServer(root / "redis").start()
        env = local_env(server.url, root, COUNT_DIR=str(root / "counts"))
        workers = [start_worker(h, host(args.cores), env, root / "logs") for h in HOSTS]
        try:
            records = Records(redis.Redis.from_url(server.url, decode_responses=True))
            try:
                # each fleet round beside a torchrun round, so that both see the same load
                idle, plain = [], []
                for i in range(args.rounds):
                    idle.append(one_gang(env, root, records, f"idle{i}", args, i))
                    plain.append(torchrun_loop(env, args))
                busy = [
                    one_gang(env, root, records, f"busy{i}", args, 50 + i, busy=args.busy)
                    for i in range(args.rounds)
                ]
            except SystemExit:
                for h in HOSTS:
                    log = (root / "logs" / f"{h}.log").read_text(errors="replace")
                    print(log[-4000:], file=sys.stderr)
                raise
        finally:
            for w in workers:
                stop_worker(w)
            server.stop()
    fleet_loop = statistics.median(r["loop"] for r in idle)
    print(f"a nodes = 2 gang on 2 simulated hosts, {args.rounds} round(s) (seconds: median, max)")
    for label, rows in (("idle hosts", idle), (f"hosts busy ({args.busy} short jobs)", busy)):
        starts = [r["start"] for r in rows]
        print(
            f"  publish -> all started, {label:<28} "
            f"{statistics.median(starts):6.2f} {max(starts):6.2f}"
        )
    ratio = fleet_loop / statistics.median(plain)
    print(
        f"  all_reduce loop ({args.iterations} x {args.numel} floats): fleet "
        f"{fleet_loop:.3f}s, torchrun {statistics.median(plain):.3f}s, ratio {ratio:.2f}"
    )


if __name__ == "__main__":
    main()
