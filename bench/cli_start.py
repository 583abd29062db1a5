"""How long `fleet` takes to answer: `fleet --version`, `fleet --help`, `fleet status` and
`fleet why JOB` against `python -c pass`, all measured in the same run.

Starts its own redis-server and publishes a few jobs (nothing serves them, so `why` has a
waiting job to explain). Each command runs --runs times in a child process, bytecode cached
(one unmeasured run first), the runs going round the commands in turn; for each, the median
CPU time (user + sys of the child, from ``getrusage(RUSAGE_CHILDREN)``) with the least in
brackets, the median wall time, and the CPU ratio against `python -c pass`. CPU is the figure
to compare on a shared machine: other processes stretch the wall time far more than a
command's own CPU, and the least of many runs is the nearest to a quiet machine's figure. The
load average is printed beside the figures.

The goals: at most 150 ms of CPU for `--version`, 300 ms for `status`, on a quiet machine.
``--imports`` also prints each command's heaviest imports (`python -X importtime`). Where
OpenTelemetry is installed, the row `status, OTel as is` runs `fleet status` with redis-py
imported as it is (core.redis_import off): what hiding OpenTelemetry saves.
``--against DIR`` times the `fleet` commands of another checkout's code too, in the same runs
(say a copy of main made with `git archive main | tar -x -C DIR`): before and after a change.

Run from the repo root:
`python bench/cli_start.py [--runs 15] [--jobs 20] [--imports] [--against DIR]`.
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
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.cli import local_env, publish  # noqa: E402
from bench.timing import parse_args  # noqa: E402
from fleet.redis_server import RedisServer  # noqa: E402

GOALS_S = {"fleet --version": 0.150, "fleet status": 0.300}  # CPU, on a quiet machine
Command = tuple[list[str], Path | None]  # argv, and the folder it runs in (None: this one)
TOP_IMPORTS = 8


def fleet_argv() -> list[str]:
    """The `fleet` console script beside this Python, as an operator runs it (else -m)."""
    script = Path(sys.executable).with_name("fleet")
    return [str(script)] if script.exists() else [sys.executable, "-m", "fleet.cli"]


def children_cpu_s() -> float:
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def run_once(argv: list[str], env: dict, cwd: Path | None = None) -> tuple[float, float]:
    """One run of ``argv``: its CPU seconds (user + sys) and wall seconds; a failure raises."""
    cpu0, t0 = children_cpu_s(), time.perf_counter()
    subprocess.run(
        argv, env=env, cwd=cwd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    return children_cpu_s() - cpu0, time.perf_counter() - t0


@dataclass(frozen=True)
class Figures:
    """One command's runs: median CPU and wall seconds, and the least CPU of any run."""

    cpu: float
    wall: float
    least: float


def measure(commands: dict[str, Command], env: dict, runs: int) -> dict[str, Figures]:
    """Each command ``runs`` times, after one unmeasured run of each that caches bytecode. The
    runs go round the commands in turn, so that a load that comes and goes on a shared
    machine falls on every command alike."""
    for argv, cwd in commands.values():
        run_once(argv, env, cwd)
    got: dict[str, list[tuple[float, float]]] = {name: [] for name in commands}
    for _ in range(runs):
        for name, (argv, cwd) in commands.items():
            got[name].append(run_once(argv, env, cwd))
    return {
        name: Figures(
            statistics.median(c for c, _ in rows),
            statistics.median(w for _, w in rows),
            min(c for c, _ in rows),
        )
        for name, rows in got.items()
    }


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


# `fleet ARGS` with redis-py imported as it is, OpenTelemetry's SDK and all: what
# core.redis_import saves a command
OTEL_AS_IS = (
    "import runpy\n"
    "from core import redis_import\n"
    "redis_import.install = lambda: None\n"
    "runpy.run_module('fleet.cli', run_name='__main__')\n"
)
FLEET_ROWS = {
    "fleet --version": ["--version"],
    "fleet --help": ["--help"],
    "fleet status": ["status"],
    "fleet why": ["why", "b[seed=0]"],
}


def otel_installed() -> bool:
    """redis-py 8 imports the OpenTelemetry SDK when it is installed (mlflow-skinny brings it)."""
    from importlib.util import find_spec

    return find_spec("opentelemetry") is not None


def commands_of(against: Path | None) -> tuple[dict[str, Command], dict[str, Command]]:
    """The commands to time, by row, and those of the checkout ``against`` (its code, run
    with this interpreter, as ``python -m fleet.cli`` in its folder)."""
    fleet = fleet_argv()
    here = {
        "python -c pass": ([sys.executable, "-c", "pass"], None),
        # the floor of any verb that reads Redis: redis-py's own import
        "import redis": ([sys.executable, "-c", "import redis"], None),
        **{name: ([*fleet, *words], None) for name, words in FLEET_ROWS.items()},
    }
    if otel_installed():
        here["status, OTel as is"] = ([sys.executable, "-c", OTEL_AS_IS, "status"], ROOT)
    there = {
        name: ([sys.executable, "-m", "fleet.cli", *words], against)
        for name, words in FLEET_ROWS.items()
        if against is not None
    }
    return here, there


def ms(f: Figures | None) -> str:
    return f"{f.cpu * 1000:6.0f} ({f.least * 1000:4.0f})" if f else ""


def main() -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--runs", type=int, default=15, help="runs of each command (the median)")
    p.add_argument("--jobs", type=int, default=20, help="jobs `fleet status` lists")
    p.add_argument("--imports", action="store_true", help="also each command's heaviest imports")
    p.add_argument(
        "--against",
        type=Path,
        metavar="DIR",
        help="also time each `fleet` command from another checkout's code (a copy of the code "
        "before a change, say), in the same runs",
    )
    args = parse_args(p, runs=1, jobs=3)
    here, there = commands_of(args.against.resolve() if args.against else None)
    with tempfile.TemporaryDirectory() as tmp, RedisServer(Path(tmp) / "redis") as server:
        env = local_env(server.url, Path(tmp))
        env.pop("PYTHONDONTWRITEBYTECODE", None)  # bytecode cached, as an installed fleet has
        seeds = ", ".join(str(i) for i in range(args.jobs))
        publish(env, Path(tmp), f'[[jobs]]\nname = "b"\ncommand = ["true"]\n'
                f"[jobs.sweep]\nseed = [{seeds}]\n")  # fmt: skip
        load_before = os.getloadavg()
        figures = measure({**here, **{f"against {n}": c for n, c in there.items()}}, env, args.runs)
        load_after = os.getloadavg()
        base_cpu = figures["python -c pass"].cpu
        print(
            f"{args.runs} runs each, in turn, median (least); load average {load_before[0]:.2f} "
            f"before, {load_after[0]:.2f} after, on {os.cpu_count()} CPUs; OpenTelemetry SDK "
            f"{'installed' if otel_installed() else 'not installed'}"
        )
        if there:
            print(f"against: the fleet commands of {args.against}'s code")
        against = f"  {'against CPU ms':>14}" if there else ""
        print(f"{'command':<20} {'CPU ms':>13} {'x pass':>7} {'wall ms':>8}{against}  goal (CPU)")
        for name in here:
            f, goal = figures[name], GOALS_S.get(name)
            verdict = (
                f"{goal * 1000:.0f} ms: {'met' if f.cpu <= goal else 'missed'}" if goal else ""
            )
            other = f"  {ms(figures.get(f'against {name}')):>14}" if there else ""
            print(
                f"{name:<20} {ms(f):>13} {f.cpu / max(base_cpu, 1e-6):6.1f}x "
                f"{f.wall * 1000:8.0f}{other}  {verdict}"
            )
        if args.imports:
            for name, (argv, _) in here.items():
                if name.startswith("fleet "):
                    tops = heaviest_imports(argv, env)
                    print(f"{name}: " + ", ".join(f"{m} {us / 1000:.0f} ms" for us, m in tops))
    return 0


if __name__ == "__main__":
    sys.exit(main())
