"""Trained output is durable: kill a worker just after its trainer exited, restart it on the
same host, and count trainer runs by side effect.

FLEET_LATE_KILLS (default 5) sets how many late kills the first test makes; run it with
more for figures:
FLEET_LATE_KILLS=20 .venv/bin/python -m pytest -s tests/e2e/test_durable.py -k late
"""

from __future__ import annotations

import json
import os
import signal
import time

import pytest

from artifacts.stores import open_store_at
from core.constants import LEASE_KEY
from state import queues
from state.jobrecord import JobState
from tests.harness.durable import BIG_MIB, big_manifest, run_dirs, wait_trained
from tests.waiting import wait_until

pytestmark = pytest.mark.e2e
LATE_KILLS = int(os.environ.get("FLEET_LATE_KILLS", "5"))
FROM_DISK_END = ": succeeded (finished from its output after the worker restarted) ---"
FAST_S = 0.01  # how often a wait looks: a late kill has a short window to hit


def kill(chaos, name: str) -> None:
    """SIGKILL the worker and its watchman (its process group, which its jobs are not in): as
    if its host went down, so only a restart or the trained grace can finish the job (the
    watchman's own finish is tests/e2e/test_liveness.py's)."""
    os.killpg(chaos.workers[name].pid, signal.SIGKILL)
    chaos.workers[name].wait()


def keep_lease(chaos, job_id: str) -> int:
    """Take the TTL off the dead run's lease: it lasts until the restarted worker renews it
    under the same run's token (or the run ends). 1 if the lease was there to keep."""
    kept = chaos.client().persist(LEASE_KEY + job_id)
    assert kept, "the lease expired before the kill: the worker stopped renewing it"
    return 1


def test_a_worker_killed_just_after_its_trainer_exited_finishes_the_job_on_restart_without_retraining(  # noqa: E501
    chaos,
):
    # Two hosts, each able to run every job: whichever trains a job is killed right after its
    # trainer exits (alternately: once the record says trained, or once the job's process is
    # gone), and restarted under the same name. The other host's reaper runs all along, so a
    # job handed on when the 2 s lease expired would be trained twice.
    hosts = ("late-a", "late-b")
    for h in hosts:
        chaos.start(h)
    retrains, finished_from_disk, gaps = {}, 0, 0
    for i in range(LATE_KILLS):
        name = f"late{i}"
        ids = chaos.publish(big_manifest(chaos, {name: (BIG_MIB, 0.3)}))
        job_id = ids[name]
        if i % 2 == 0:
            rec = wait_trained(chaos, job_id)
        else:
            wait_until(
                "the job's exit",
                lambda name=name: chaos.runs(name) == 1 and not chaos.job_processes(),
                60,
                chaos.logs,
                FAST_S,
            )
            rec = chaos.records().get(job_id)
        victim = rec.worker
        kill(chaos, victim)
        killed = chaos.records().get(job_id)
        assert killed.state is JobState.RUNNING, "the kill came too late to test anything"
        if not killed.trained:
            # killed after the job exited but before its trained mark: only the lease holds
            # the job for this host, so the test keeps the lease while the worker restarts,
            # as if the restart came within it, however long a busy machine makes it
            gaps += keep_lease(chaos, job_id)
        chaos.start(victim, wait=False)
        recs = chaos.wait(ids, timeout_s=120)
        retrains[name] = chaos.runs(name, "start") - 1
        from_disk = f"finishing {name} from the output" in chaos.logs()
        finished_from_disk += from_disk
        assert recs[name].worker == victim
        if from_disk:  # `fleet logs` shows the dead run ended, not an attempt left open
            # (the worker writes that end mark just after the record says succeeded)
            def shown(name=name) -> list[str]:
                return chaos.fleet("logs", name).stdout.rstrip().splitlines()

            wait_until(
                f"{name}'s end mark in fleet logs",
                lambda: (lines := shown()) and lines[-1].endswith(FROM_DISK_END),
                30,
                lambda: "\n".join(shown()),
            )
    print(
        f"\nlate kills: {LATE_KILLS}, re-trains: {sum(retrains.values())}, "
        f"finished from the dead run's work dir: {finished_from_disk}, "
        f"killed before the trained mark: {gaps}"
    )
    assert retrains == {f"late{i}": 0 for i in range(LATE_KILLS)}, chaos.logs()
    store = open_store_at(chaos.env["FLEET_STORE_URL"])
    listed = chaos.listed(retrains)
    assert sorted(a["name"] for a in listed) == sorted(retrains)
    for a in listed:
        assert a["files"]["out/big.bin"] and store.verify("command", a["sha256"])
    for h in hosts:  # every run folder went: the finished ones and the rest
        wait_until(
            f"{h}'s run folders to go", lambda h=h: not run_dirs(chaos, h), 30, chaos.logs, FAST_S
        )


def test_a_killed_runs_work_dir_is_removed_when_its_worker_starts_again(chaos):
    ids = chaos.publish(chaos.manifest({"leak": 30}))
    chaos.start("leak-w")
    chaos.wait_running(ids["leak"])
    wait_until("the job's start", lambda: chaos.runs("leak", "start") == 1, 30, chaos.logs, FAST_S)
    (left,) = run_dirs(chaos, "leak-w")
    assert (left / "work" / "job.json").is_file() and (left / "run.json").is_file()
    kill(chaos, "leak-w")
    assert left.exists()  # SIGKILL: nothing of ours ran to clean it
    chaos.start("leak-w")
    wait_until(f"{left} to be removed", lambda: not left.exists(), 30, chaos.logs, FAST_S)
    # the job itself is handed on by the restarted worker at once and runs again from scratch
    chaos.wait_running(ids["leak"])


def test_a_trained_job_whose_host_never_comes_back_is_trained_again_elsewhere_after_the_grace(
    chaos,
):
    chaos.env["FLEET_TRAINED_GRACE_S"] = "3"
    chaos.start("lost-a")
    ids = chaos.publish(big_manifest(chaos, {"lost": (BIG_MIB, 0.3)}))
    rec = wait_trained(chaos, ids["lost"])
    assert rec.trained["host"] == "lost-a" and rec.trained["dir"].startswith(str(chaos.root))
    kill(chaos, "lost-a")
    killed_at = time.monotonic()
    assert chaos.records().get(ids["lost"]).state is JobState.RUNNING
    chaos.start("lost-b")
    recs = chaos.wait(ids, timeout_s=120)
    assert recs["lost"].worker == "lost-b" and chaos.runs("lost", "start") == 2
    assert time.monotonic() - killed_at > 3  # not before the grace ran out
    assert recs["lost"].trained["host"] == "lost-b"  # the claim cleared lost-a's marker


def test_a_run_that_was_only_marked_trained_is_not_re_run_by_a_duplicate_delivery(chaos):
    # the record's trained marker holds the job for its host: a second copy of the message
    # (here: a re-publish with --force would reset it, so the redelivery is simulated by
    # pushing the record's own message again) is dropped while the host may come back
    chaos.start("dup-a")
    ids = chaos.publish(big_manifest(chaos, {"dup": (BIG_MIB, 0.3)}))
    wait_trained(chaos, ids["dup"])
    kill(chaos, "dup-a")
    chaos.start("dup-b")
    client = chaos.client()
    wait_until(
        "the lease to expire",
        lambda: not client.exists(f"fleet:lease:{ids['dup']}"),
        30,
        chaos.logs,
        FAST_S,
    )
    key, msg = (client.hget(f"fleet:job:{ids['dup']}", k) for k in ("pri_key", "pri_msg"))
    queues.push(client, key.decode(), msg.replace(b"@@FLEET-TAG@@", f"{ids['dup']}.99".encode()))
    wait_until(
        "the copy to be dropped",
        lambda: "waiting for its upload" in chaos.logs(),
        30,
        chaos.logs,
        0.2,
    )
    assert chaos.runs("dup", "start") == 1
    chaos.start("dup-a", wait=False)
    recs = chaos.wait(ids, timeout_s=120)
    assert recs["dup"].worker == "dup-a" and chaos.runs("dup", "start") == 1
    assert json.loads(client.hget(f"fleet:job:{ids['dup']}", "artifact"))["sha256"]
