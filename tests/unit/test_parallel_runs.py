"""scripts/test's parallel mode (tests/fixtures/parallel.py): the tests that share a module's
fixture run in one process, so its fleet starts once; the others are spread over processes."""

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SUITE = """
import json, os, pytest

def record(kind, i):
    with open(os.environ["SEEN"], "a") as f:
        f.write(json.dumps([kind, i, os.environ["PYTEST_XDIST_WORKER"]]) + "\\n")

@pytest.fixture(scope="module")
def fleet():
    record("setup", 0)

@pytest.mark.parametrize("i", range(6))
def test_shared(fleet, i):
    record("shared", i)

@pytest.mark.parametrize("i", range(6))
def test_alone(i):
    import time
    time.sleep(0.2)  # long enough for both processes to take some
    record("alone", i)
"""


def test_a_modules_shared_fixture_is_set_up_once_and_its_tests_run_in_its_process(tmp_path):
    (tmp_path / "conftest.py").write_text('pytest_plugins = ["tests.fixtures.parallel"]\n')
    (tmp_path / "test_suite.py").write_text(SUITE)
    seen = tmp_path / "seen.jsonl"
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "2"]
        + ["--dist", "loadgroup", "--rootdir", str(tmp_path), str(tmp_path)],
        env=dict(os.environ, SEEN=str(seen), PYTHONPATH=str(ROOT)),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    rows = [json.loads(line) for line in seen.read_text().splitlines()]
    setups = [w for kind, _, w in rows if kind == "setup"]
    shared = {w for kind, _, w in rows if kind == "shared"}
    alone = {w for kind, _, w in rows if kind == "alone"}
    assert len(setups) == 1 and shared == set(setups), rows
    assert len(alone) == 2, f"the free tests all ran in one process: {rows}"
