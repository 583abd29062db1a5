"""The fleet CLI as the benches drive it: in a child process, under the bench's fleet env."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path


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
