"""`fleet status --watch` into a file writes whole frames as it goes, not only when stopped."""

import os
import signal
import subprocess
import sys

import pytest

from tests.harness.cli import CLI_HANG_S
from tests.waiting import wait_until

pytestmark = pytest.mark.integration


def test_watch_into_a_file_writes_whole_frames_while_it_runs(redis_url, tmp_path):
    out = tmp_path / "watch.txt"
    env = dict(os.environ, FLEET_BROKER_URL=redis_url, COLUMNS="80")
    with out.open("w") as f:
        proc = subprocess.Popen(
            # -X faulthandler: a child that outlives its Ctrl+C prints every thread's stack
            [sys.executable, "-X", "faulthandler", "-m", "fleet.cli", "status", "--watch"]
            + ["--every", "0.3"],
            stdout=f,
            stderr=subprocess.STDOUT,
            env=env,
        )
        try:
            # a bound for a failure, not a window: its start took over 30 s on a loaded machine
            frames = wait_until(
                "two frames",
                lambda: (n := out.read_text().count("fleet status ·")) >= 2 and n,
                120,
                out.read_text,
            )
            assert proc.poll() is None  # still running: the frames came while it watched
        finally:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.send_signal(signal.SIGABRT)  # faulthandler writes where it is stuck
                proc.wait(30)
                pytest.fail(f"still running 30 s after Ctrl+C:\n{out.read_text()[-4000:]}")
    assert frames >= 2, out.read_text()
    assert "· every 0.3s ·" in out.read_text()  # the pause it keeps, not "0s"
    assert "0 jobs: none" in out.read_text() and max(map(len, out.read_text().splitlines())) <= 80


def test_dead_letter_with_no_entries_says_so_instead_of_an_empty_table(redis_url):
    env = dict(os.environ, FLEET_BROKER_URL=redis_url)
    run = subprocess.run(
        [sys.executable, "-m", "fleet.cli", "dead-letter"],
        env=env,
        capture_output=True,
        text=True,
        timeout=CLI_HANG_S,
    )
    assert run.returncode == 0 and run.stdout.startswith("no entries in ") and "┏" not in run.stdout
