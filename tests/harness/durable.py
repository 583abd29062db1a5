"""Command jobs with big outputs, for the tests of durable trained output: the manifest, the
run folders a host left, and the record caught trained while its run still uploads."""

from __future__ import annotations

import sys
import uuid
from pathlib import Path

from core.constants import RUNS_DIR
from state.jobrecord import JobState
from tests.waiting import wait_until

FAST_S = 0.01  # how often a wait looks: a late kill has a short window to hit
# MiB of output a late-kill job writes: bundling and storing it is the window in which its record
# says trained while the run still uploads (48 MiB was once too short on a quiet box: the test's
# polls missed it)
BIG_MIB = 128
BIGOUT = Path(__file__).resolve().parents[1] / "e2e" / "bigout.py"


def big_manifest(chaos, jobs: dict[str, tuple[int, float]]) -> Path:
    """Command jobs writing ``mib`` MiB of output after ``sleep_s``."""
    text = ""
    for name, (mib, sleep_s) in jobs.items():
        text += (
            f'[[jobs]]\nname = "{name}"\n'
            f'command = ["{sys.executable}", "{BIGOUT}", "{mib}", "{sleep_s}", '
            f'"{chaos.tag}", "{name}"]\n'
            'artifacts = ["out/*"]\n'
        )
    path = chaos.root / f"m-{uuid.uuid4().hex[:6]}.toml"
    path.write_text(text)
    return path


def run_dirs(chaos, host: str) -> list[Path]:
    runs = chaos.root / "work" / host / RUNS_DIR  # fleet.local.start_worker's FLEET_WORK_DIR
    return sorted(runs.iterdir()) if runs.exists() else []


def wait_trained(chaos, job_id: str):
    """The record once it says trained, while the run is still bundling or uploading."""

    def trained_running():
        rec = chaos.records().get(job_id)
        assert rec.state is not JobState.SUCCEEDED, (
            "finished before the test saw it trained: output too small"
        )
        return rec.trained and rec.state is JobState.RUNNING and rec

    return wait_until("the record to say trained", trained_running, 60, chaos.logs, FAST_S)
