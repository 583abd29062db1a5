"""A local fleet left running by `fleet local --keep`.

Its state file, how to use it, how to stop it.

The state file (``<root>/fleet.json``) names each process with its pid and what its command
line must contain, so `fleet local --stop` never signals a pid the system has since given
to something else.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import sys
import time
from pathlib import Path

import psutil

from core.errors import FleetError
from core.registry import FLEET_BROKER_URL, FLEET_S3_ENDPOINT_URL, FLEET_STORE_URL
from fleet.rootlock import WORKER_EXPECT, clear_stopped
from fleet.rootlock import live as _live

STATE_FILE = "fleet.json"
STOP_WAIT_S = 30.0
FLOWER_PORT = 5555  # Flower's own default
REPO = Path(__file__).resolve().parents[1]  # where flowerconfig.py is: Flower reads it from the cwd
# never credentials
EXPORTED = tuple(s.name for s in (FLEET_BROKER_URL, FLEET_STORE_URL, FLEET_S3_ENDPOINT_URL))


def _fleet_command() -> str:
    beside = Path(sys.executable).with_name("fleet")
    return str(beside) if beside.exists() else "fleet"


def save(root: Path, server, workers: dict, env: dict) -> dict:
    state = {
        "root": str(root),
        "started_at": time.time(),
        "env": {k: env[k] for k in EXPORTED if env.get(k)},
        "processes": [{"name": "redis", "pid": server.proc.pid, "expect": server.expect}]
        + [{"name": n, "pid": p.pid, "expect": WORKER_EXPECT} for n, p in workers.items()],
    }
    (root / STATE_FILE).write_text(json.dumps(state, indent=2))
    return state


def export_line(state: dict) -> str:
    return "export " + " ".join(f"{k}={shlex.quote(v)}" for k, v in state["env"].items())


def stop_line(state: dict) -> str:
    return f"{_fleet_command()} local --stop --root {shlex.quote(state['root'])}"


def flower_line(state: dict, port: int = FLOWER_PORT) -> str:
    """The one command that starts Flower on this fleet, from the folder that holds
    ``flowerconfig.py``; on loopback, so a local try needs no password."""
    beside = Path(sys.executable).with_name("celery")
    celery = str(beside) if beside.exists() else "celery"
    broker = shlex.quote(state["env"].get(FLEET_BROKER_URL.name, ""))
    return (
        f"cd {shlex.quote(str(REPO))} && FLEET_BROKER_URL={broker} FLOWER_UNAUTHENTICATED=1 "
        f"{celery} -A tasks flower --port={port}"
    )


def announce(state: dict, console) -> None:
    procs = ", ".join(f"{p['name']} (pid {p['pid']})" for p in state["processes"])
    console.print(
        f"left running: {procs}; state in {Path(state['root']) / STATE_FILE}", markup=False
    )
    console.print("use it from another shell:", markup=False)
    console.print(f"  {export_line(state)}", markup=False, highlight=False, soft_wrap=True)
    console.print(f"watch it in Flower, then open http://127.0.0.1:{FLOWER_PORT}/ :", markup=False)
    console.print(f"  {flower_line(state)}", markup=False, highlight=False, soft_wrap=True)
    console.print("stop it:", markup=False)
    console.print(f"  {stop_line(state)}", markup=False, highlight=False, soft_wrap=True)


def load(root: Path) -> dict | None:
    path = root / STATE_FILE
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except ValueError as e:
        raise FleetError(
            f"{path}: unreadable ({e}); stop its processes by hand and delete it"
        ) from e


def hints(root: Path) -> str:
    """How to use and stop the kept fleet in ``root`` (empty when none is recorded there)."""
    try:
        state = load(root)
    except FleetError:
        return ""
    return f"use it ({export_line(state)}) or stop it: {stop_line(state)}" if state else ""


def stop(root: Path, console, wait_s: float = STOP_WAIT_S) -> int:
    """Stop a kept fleet: workers first (warm shutdown, their jobs go back), then Redis."""
    state = load(root)
    if state is None:
        raise FleetError(
            f"no kept fleet in {root} (no {STATE_FILE}); was it started with "
            "`fleet local --keep` from this directory? Give --root DIR otherwise"
        )
    workers = [p for p in state["processes"] if p["name"] != "redis"]
    redis = [p for p in state["processes"] if p["name"] == "redis"]
    for group in (workers, redis):
        live = [(p, proc) for p in group if (proc := _live(p))]
        for entry, proc in live:
            console.print(f"stopping {entry['name']} (pid {entry['pid']})", markup=False)
            _signal(proc, signal.SIGTERM)
        _, alive = psutil.wait_procs([proc for _, proc in live], timeout=wait_s)
        for proc in alive:
            _signal(proc, signal.SIGKILL)
        psutil.wait_procs(alive, timeout=5)
    (root / STATE_FILE).unlink(missing_ok=True)
    clear_stopped(root)
    console.print("stopped", markup=False)
    return 0


def _signal(proc: psutil.Process, sig: int) -> None:
    # workers lead their own process group (start_new_session): its jobs go with them
    try:
        if sig == signal.SIGKILL:
            os.killpg(proc.pid, sig)
        else:
            proc.send_signal(sig)
    except (ProcessLookupError, psutil.NoSuchProcess, PermissionError):
        pass
