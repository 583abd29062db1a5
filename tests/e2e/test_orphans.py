"""No process of a stopped job survives 10 s, on real workers: a command job that setsids a
SIGTERM-ignoring daemon (double fork) and starts children in sessions of their own, each
ignoring SIGTERM (tests/harness/orphans.py), cancelled with `fleet cancel`, timed out, and
orphaned by its worker's kill -9. Checked by the pids the job wrote, not by the record."""

from __future__ import annotations

import os
import signal

import pytest

from state.jobrecord import JobState
from tests.harness import orphans
from tests.harness.manifests import command_job
from tests.waiting import wait_until

pytestmark = pytest.mark.e2e


def publish(chaos, name: str, **keys) -> tuple[dict, object]:
    pid_file = chaos.root / f"{name}.pids"
    manifest = chaos.root / f"{name}.toml"
    manifest.write_text(command_job(name, orphans.job_argv(pid_file), **keys))
    return chaos.publish(manifest), pid_file


def test_a_cancelled_jobs_processes_in_other_sessions_are_gone_within_10_s(chaos):
    chaos.start("orphans-a")
    ids, pid_file = publish(chaos, "cancelled")
    pids = orphans.started(pid_file, detail=chaos.logs)
    try:
        chaos.fleet("cancel", "cancelled", "--yes")
        orphans.all_gone(pids, chaos.logs)
        assert chaos.records().get(ids["cancelled"]).state is JobState.CANCELLED
    finally:
        orphans.kill(pids)


def test_a_timed_out_jobs_processes_in_other_sessions_are_gone_within_10_s(chaos):
    chaos.start("orphans-t")
    ids, pid_file = publish(chaos, "slow", timeout_s=15, max_attempts=1)
    pids = orphans.started(pid_file, detail=chaos.logs)
    try:
        rec = chaos.wait(ids, states=("failed",), timeout_s=60)["slow"]
        assert "timed out" in (rec.last_error or "")
        orphans.all_gone(pids, chaos.logs)
    finally:
        orphans.kill(pids)


@pytest.mark.parametrize("cgroups", ["1", "0"], ids=["cgroup-if-allowed", "proc-scan"])
def test_a_killed_workers_job_leaves_no_process_and_goes_on_only_once_none_is_left(chaos, cgroups):
    chaos.env["FLEET_LEASE_TTL_S"] = "60"  # only the watchman hands the job on this soon
    victim = chaos.start("orphans-k", FLEET_RUN_CGROUPS=cgroups)
    ids, pid_file = publish(chaos, "orphaned")
    pids = orphans.started(pid_file, detail=chaos.logs)
    try:
        chaos.wait_running(ids["orphaned"])
        os.kill(victim.pid, signal.SIGKILL)  # the worker only: its watchman lives on
        victim.wait()
        orphans.all_gone(pids, chaos.logs)
        # handed on by the watchman (the lease is far longer), after its processes were gone
        wait_until(
            "the job handed on",
            lambda: chaos.records().get(ids["orphaned"]).state is JobState.QUEUED,
            30,
            chaos.logs,
        )
        assert not orphans.alive(pids)
    finally:
        orphans.kill(pids)
