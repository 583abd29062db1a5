"""``python -m fleet.cli`` as an operator runs it, in a child process with a fleet's env."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def fleet_cli(
    env: dict, *args: str, timeout_s: float = 120, check: bool = False, ok: bool = False, **kw
) -> subprocess.CompletedProcess:
    """Run ``fleet ARGS`` under ``env``.

    ``check`` raises on a non-zero exit (subprocess's CalledProcessError); ``ok`` asserts a zero
    exit and shows the command's output when it is not.
    """
    done = subprocess.run(
        [sys.executable, "-m", "fleet.cli", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=check,
        cwd=ROOT,
        **kw,
    )
    assert not ok or done.returncode == 0, f"fleet {' '.join(args)}: {done.stdout}{done.stderr}"
    return done
