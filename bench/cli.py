"""The fleet CLI as the benches drive it: in a child process, under the bench's fleet env."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path


def local_env(broker_url: str, root: Path, **extra: str) -> dict:
    """The bench's fleet env: this process's, on ``broker_url`` with a local store under
    ``root``, plus ``extra``; simulated hosts' capability is never inherited."""
    import os

    env = dict(os.environ, FLEET_BROKER_URL=broker_url, FLEET_STORE_URL=f"file://{root / 'store'}")
    env.update(extra)
    env.pop("FLEET_CAPABILITY", None)
    return env


def fleet_cli(env: dict, *args: str, timeout_s: float = 120) -> subprocess.CompletedProcess:
    """Run ``fleet ARGS``; a non-zero exit raises (CalledProcessError), so a bench never times
    a command that failed."""
    return subprocess.run(
        [sys.executable, "-m", "fleet.cli", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=True,
    )


def publish(env: dict, root: Path, text: str) -> dict[str, str]:
    """Write ``text`` as a manifest under ``root`` and publish it: each job's name -> its ID."""
    path = root / f"m-{time.monotonic_ns()}.toml"
    path.write_text(text)
    done = fleet_cli(env, "publish", str(path), "--json")
    return {r["name"]: r["job_id"] for r in json.loads(done.stdout)}
