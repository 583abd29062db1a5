"""What the documents state in several places reads the same in each: the time a job waits
after its worker process dies (measured by bench/dead_worker.py, stated in benchmarks.md),
and which failures `max_attempts` retries by default."""

import re
from pathlib import Path

from core import constants as C

DOCS = Path(__file__).resolve().parents[2] / "docs"


def text(name: str) -> str:
    """A document's text as it reads: emphasis dropped, lines joined."""
    return " ".join((DOCS / name).read_text().replace("**", "").split())


def test_the_hand_on_time_after_a_workers_death_is_one_measured_figure_in_every_document():
    measured = re.search(
        r"The worker process alone \(its watchman hands the job on\): ([\d.]+) s",
        text("benchmarks.md"),
    )
    assert measured, "benchmarks.md: the dead worker bench's watchman figure is missing"
    figure = measured.group(1)
    assert f"SIGKILLed runs on another host {figure} s later" in text("exactly-once.md")
    assert f"its watchman: {figure} s from the kill" in text("limits.md")


def test_the_wait_for_a_vanished_hosts_job_is_one_measured_figure_in_every_document():
    measured = re.search(
        r"as a host that vanished \(only the lease can tell\): ([\d.]+) s",
        text("benchmarks.md"),
    )
    assert measured, "benchmarks.md: the dead worker bench's lease figure is missing"
    figure = measured.group(1)
    assert f"a reaper pass ({figure} s at the default 60 s TTL)" in text("exactly-once.md")
    assert f"a reaper pass ({figure} s median at the default 60 s" in text("limits.md")


def test_max_attempts_says_a_failed_run_is_not_retried_by_default_but_a_lost_one_is():
    manifest = text("manifest.md")
    assert "A run that fails (its process exits non-zero, or times out) is not retried" in manifest
    assert "unless the job sets `max_attempts`" in manifest
    assert f"up to {C.DEFAULT_MAX_ATTEMPTS} attempts by default" in manifest
