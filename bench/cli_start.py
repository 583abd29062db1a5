"""How long `fleet` takes to answer: `fleet --version`, `fleet --help`, `fleet status` and
`fleet why JOB` against `python -c pass`, all measured in the same run.

Starts its own redis-server and publishes a few jobs (nothing serves them, so `why` has a
waiting job to explain). Each command runs --runs times in a child process, bytecode cached
(one unmeasured run first); for each, the median CPU time (user + sys of the child, from
``getrusage(RUSAGE_CHILDREN)``) and wall time, and the CPU ratio against `python -c pass`.
CPU is the figure to compare on a shared machine: other processes stretch the wall time far
more than a command's own CPU. The load average is printed beside the figures.

The goals: at most 150 ms of CPU for `--version`, 300 ms for `status`, on a quiet machine.
``--imports`` also prints each command's heaviest imports (`python -X importtime`).

Run from the repo root: `python bench/cli_start.py [--runs 15] [--jobs 20] [--imports]`.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.cli import local_env, publish  # noqa: E402
from bench.timing import parse_args  # noqa: E402
from fleet.redis_server import RedisServer  # noqa: E402

GOALS_S = {"fleet --version": 0.150, "fleet status": 0.300}  # CPU, on a quiet machine
TOP_IMPORTS = 8


def fleet_argv() -> list[str]:
    """The `fleet` console script beside this Python, as an operator runs it (else -m)."""
    script = Path(sys.executable).with_name("fleet")
    return [str(script)] if script.exists() else [sys.executable, "-m", "fleet.cli"]


def children_cpu_s() -> float:
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def run_once(argv: list[str], env: dict) -> tuple[float, float]:
    """One run of ``argv``: its CPU seconds (user + sys) and wall seconds; a failure raises."""
    cpu0, t0 = children_cpu_s(), time.perf_counter()
    subprocess.run(argv, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    return children_cpu_s() - cpu0, time.perf_counter() - t0


def measure(argv: list[str], env: dict, runs: int) -> tuple[float, float]:
    """Median CPU and wall seconds over ``runs``, after one unmeasured run that caches bytecode."""
    run_once(argv, env)
    got = [run_once(argv, env) for _ in range(runs)]
    return statistics.median(c for c, _ in got), statistics.median(w for _, w in got)


def heaviest_imports(argv: list[str], env: dict) -> list[tuple[int, str]]:
    """The top-level imports of one run that took longest (cumulative µs, as -X importtime)."""
    done = subprocess.run(
        [sys.executable, "-X", "importtime", *argv[1:]]
        if argv[0] == sys.executable
        else [sys.executable, "-X", "importtime", "-m", "fleet.cli", *argv[1:]],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    rows = []
    for line in done.stderr.splitlines():
        parts = line.split("|")
        if len(parts) == 3 and parts[1].strip().isdigit():
            name = parts[2]
            if name.startswith(" ") and not name.startswith("  "):  # one space: top level
                rows.append((int(parts[1]), name.strip()))
    return sorted(rows, reverse=True)[:TOP_IMPORTS]


# `fleet ARGS` as on a host without OpenTelemetry: redis-py then skips its SDK
WITHOUT_OTEL = (
    "import runpy, sys\n"
    "sys.modules['opentelemetry'] = None\n"
    "runpy.run_module('fleet.cli', run_name='__main__')\n"
)


def otel_installed() -> bool:
    """redis-py 8 imports the OpenTelemetry SDK when it is installed (mlflow-skinny brings it)."""
    from importlib.util import find_spec

    return find_spec("opentelemetry") is not None


def main() -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--runs", type=int, default=15, help="runs of each command (the median)")
    p.add_argument("--jobs", type=int, default=20, help="jobs `fleet status` lists")
    p.add_argument("--imports", action="store_true", help="also each command's heaviest imports")
    args = parse_args(p, runs=1, jobs=3)
    fleet = fleet_argv()
    with tempfile.TemporaryDirectory() as tmp, RedisServer(Path(tmp) / "redis") as server:
        env = local_env(server.url, Path(tmp))
        env.pop("PYTHONDONTWRITEBYTECODE", None)  # bytecode cached, as an installed fleet has
        seeds = ", ".join(str(i) for i in range(args.jobs))
        publish(env, Path(tmp), f'[[jobs]]\nname = "b"\ncommand = ["true"]\n'
                f"[jobs.sweep]\nseed = [{seeds}]\n")  # fmt: skip
        commands = {
            "python -c pass": [sys.executable, "-c", "pass"],
            # the floor of any verb that reads Redis: redis-py's own import
            "import redis": [sys.executable, "-c", "import redis"],
            "fleet --version": [*fleet, "--version"],
            "fleet --help": [*fleet, "--help"],
            "fleet status": [*fleet, "status"],
            "fleet why": [*fleet, "why", "b[seed=0]"],
        }
        if otel_installed():  # what a host without it (a plain install) pays
            commands["status, no OTel"] = [sys.executable, "-c", WITHOUT_OTEL, "status"]
        load_before = os.getloadavg()
        figures = {name: measure(argv, env, args.runs) for name, argv in commands.items()}
        load_after = os.getloadavg()
        base_cpu = figures["python -c pass"][0]
        print(
            f"{args.runs} runs each, median; load average {load_before[0]:.2f} before, "
            f"{load_after[0]:.2f} after, on {os.cpu_count()} CPUs; OpenTelemetry SDK "
            f"{'installed (redis-py imports it)' if otel_installed() else 'not installed'}"
        )
        print(f"{'command':<18} {'CPU ms':>7} {'x pass':>7} {'wall ms':>8}  goal (CPU)")
        for name, (cpu, wall) in figures.items():
            goal = GOALS_S.get(name)
            verdict = f"{goal * 1000:.0f} ms: {'met' if cpu <= goal else 'missed'}" if goal else ""
            print(
                f"{name:<18} {cpu * 1000:7.0f} {cpu / max(base_cpu, 1e-6):6.1f}x "
                f"{wall * 1000:8.0f}  {verdict}"
            )
        if args.imports:
            for name, argv in commands.items():
                if name.startswith("fleet "):
                    tops = heaviest_imports(argv, env)
                    print(f"{name}: " + ", ".join(f"{m} {us / 1000:.0f} ms" for us, m in tops))
    return 0


if __name__ == "__main__":
    sys.exit(main())
