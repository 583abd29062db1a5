"""``python -m fleet.cli`` as an operator runs it, in a child process with a fleet's env."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# how long a CLI run may take before the test calls it hung: a guard, not a window. The run
# ends by itself and the test waits for that; on a busy machine a verb that answers in a second
# when idle took over 60 s (`fleet export mlflow` under a loaded suite). Under pytest-timeout's
# 300 s per test, so a hung verb is named with its command rather than killed with the test.
CLI_HANG_S = 240.0


def fleet_cli(
    env: dict,
    *args: str,
    timeout_s: float = CLI_HANG_S,
    check: bool = False,
    ok: bool = False,
    **kw,
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


# `fleet ARGS`, then the names of every module it loaded on stderr's last line (-X importtime
# misses those importlib.import_module loads, as the CLI loads a verb's module)
LOADED = (
    "import atexit, runpy, sys\n"
    "atexit.register(lambda: print('\\nloaded:', *sorted(sys.modules), file=sys.stderr))\n"
    "runpy.run_module('fleet.cli', run_name='__main__')\n"
)


def imported(env: dict, *args: str, timeout_s: float = CLI_HANG_S) -> tuple[set[str], str]:
    """The modules ``fleet ARGS`` loads and its stdout; the command must exit 0."""
    done = subprocess.run(
        [sys.executable, "-c", LOADED, *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        cwd=ROOT,
    )
    assert done.returncode == 0, f"fleet {' '.join(args)}: {done.stdout}{done.stderr[-3000:]}"
    last = done.stderr.rstrip().rsplit("\n", 1)[-1].split()
    assert last[:1] == ["loaded:"], done.stderr[-3000:]
    return set(last[1:]), done.stdout
