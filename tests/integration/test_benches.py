"""Every bench script runs in its smoke mode (tiny sizes, seconds each): a bench that breaks
fails the suite instead of rotting until someone needs its figures. New benches are found by
the glob, so they are covered without an edit here."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SMOKE_TIMEOUT_S = 120  # a smoke run takes seconds; this only stops a hung one
# the scripts with a main; the rest (oracle.py, timing.py, ...) are modules they import
BENCHES = sorted(
    p for p in (ROOT / "bench").glob("*.py") if 'if __name__ == "__main__"' in p.read_text()
)

pytestmark = pytest.mark.integration


def test_the_glob_finds_the_benches():
    assert {"publish.py", "overhead.py"} <= {p.name for p in BENCHES}


@pytest.mark.parametrize("bench", BENCHES, ids=lambda p: p.stem)
def test_bench_runs_in_smoke_mode(bench: Path, tmp_path):
    env = dict(os.environ, FLEET_BENCH_SMOKE="1", TMPDIR=str(tmp_path))
    for var in ("FLEET_BROKER_URL", "FLEET_RESULT_BACKEND", "FLEET_STORE_URL"):
        env.pop(var, None)  # each bench starts its own servers
    done = subprocess.run(
        [sys.executable, str(bench)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=SMOKE_TIMEOUT_S,
    )
    assert done.returncode == 0, (
        f"{bench.name} --smoke exited {done.returncode}:\n"
        f"{done.stdout[-2000:]}\n{done.stderr[-4000:]}"
    )
