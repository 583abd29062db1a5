"""Preemption through checkpoints with real workers on simulated hosts: a priority-9 job that
only one busy host can run takes the place of a priority-1 checkpointed job there within
seconds of its checkpoint sync; the displaced job resumes later from its checkpoint and ends
with the same result as an uninterrupted run. A job that would lose work is never displaced,
a job displaced MAX_PREEMPTIONS times runs to its end, and of two busy hosts that could make
room, only one does."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest

from core.ids import short_id
from routing.preempt import MAX_PREEMPTIONS
from state.jobrecord import JobState
from tests.e2e.ckptjob import chain
from tests.harness.cli import fleet_cli
from tests.waiting import wait_until

pytestmark = pytest.mark.e2e
JOB = Path(__file__).with_name("ckptjob.py")
BIG = {
    "cuda_devices": [{"name": "sim-80GB", "vram_total_gib": 80}],
    "ram_total_gib": 64,
    "cpu_cores": 4,
}
SMALL = {
    "cuda_devices": [{"name": "sim-16GB", "vram_total_gib": 16}],
    "ram_total_gib": 32,
    "cpu_cores": 2,
}
STEPS, STEP_S = 12, 0.5  # the low job runs about 6 s uninterrupted, past its hold


def job(
    name: str, priority: int, steps: int, *, vram: int, extra: str = "", hold: tuple = ()
) -> str:
    """A ckptjob.py job; ``hold`` (STEP, GATE) keeps it at STEP until the file GATE exists."""
    args = ", ".join(f'"{a}"' for a in (sys.executable, JOB, steps, STEP_S, *hold))
    return (
        f'[[jobs]]\nname = "{name}"\ncommand = [{args}]\n'
        f"priority = {priority}\nrequire_cuda = true\nmin_vram_gib = {vram}\n{extra}\n"
    )


def handed_back(fleet, job_id: str) -> None:
    """Wait until ``job_id`` was preempted, as its record counts (its state may already be
    running again: a free host takes it back within a second)."""
    back = lambda: fleet.records().get(job_id).preemptions >= 1  # noqa: E731
    wait_until(f"{short_id(job_id)} handed back", back, 90, fleet.logs)


@pytest.fixture
def fleet(pools):
    pools.env.update(FLEET_CHECKPOINT_EVERY_S="0.5", FLEET_LEASE_TTL_S="5")
    pools.start("big", BIG)
    pools.start("small", SMALL)  # free, but too small for either job
    return pools


def running_after(fleet, job_id: str, steps: int) -> None:
    """Wait until the job runs and has passed ``steps`` steps with a checkpoint synced."""

    def past():
        rec = fleet.records().get(job_id)
        tail = (rec.progress or {}).get("tail") or []
        done = max((int(line.split()[1]) for line in tail if line.startswith("step ")), default=0)
        return (
            rec.state is JobState.RUNNING and done >= steps and fleet.records().checkpoint(job_id)
        )

    wait_until(f"{short_id(job_id)} runs past step {steps}", past, 60, fleet.logs)


def cli(fleet, *args: str) -> str:
    return fleet_cli(fleet.env, *args, ok=True).stdout


def show(fleet, name: str) -> dict:
    return json.loads(cli(fleet, "show", name, "--json"))


def logs(fleet, name: str) -> str:
    return cli(fleet, "logs", name)


def test_an_urgent_job_takes_the_place_of_a_checkpointed_one_which_resumes_and_ends_the_same(
    fleet, tmp_path
):
    # the low job holds at step 4 until the urgent one has run: the urgent one could start
    # only by taking its place, never by its end
    gate = tmp_path / "gate"
    low = fleet.publish(job("low", 1, STEPS, vram=40, extra='checkpoint = "ckpt/"', hold=(4, gate)))
    running_after(fleet, low["low"], 4)
    urgent = fleet.publish(job("urgent", 9, 2, vram=60))
    fleet.wait(urgent, timeout_s=120)
    gate.touch()
    recs = fleet.wait({**low, **urgent}, timeout_s=120)
    assert recs["low"].state is recs["urgent"].state is JobState.SUCCEEDED, fleet.logs()
    seen = fleet.reports(["low", "urgent"])
    # the urgent job ran on the busy big host while the low one waited, then the low one resumed
    assert recs["urgent"].worker == "big" == recs["low"].worker
    first, second = seen["low"]["starts"]
    assert second["from_step"] >= 4 and second["at"] >= seen["urgent"]["end"]
    assert seen["low"]["digest"] == chain(STEPS), "the resumed run ends as an uninterrupted one"
    # who preempted whom: the records, `fleet show`, `fleet logs`
    low_rec, urgent_rec = show(fleet, "low"), show(fleet, "urgent")
    assert low_rec["preemptions"] == 1 and low_rec["attempts"] == 1 and low_rec["runs"] == 2
    assert low_rec["preempted_by"]["name"] == "urgent" and low_rec["preempted_by"]["priority"] == 9
    assert [p["name"] for p in urgent_rec["preempted"]] == ["low"]
    rows = {r["name"]: r for r in json.loads(cli(fleet, "status", "--json"))["jobs"]}
    assert rows["low"]["preemptions"] == 1 and rows["low"]["preempted_by"]["name"] == "urgent"
    assert urgent_rec["preempted"][0]["at"].endswith("+00:00")  # `fleet show` gives ISO times
    decided = recs["urgent"].preempted[0]["at"]  # the record keeps the float
    delay = recs["urgent"].started_at - decided
    print(
        f"\npreemption decision -> urgent job claimed on big: {delay:.2f}s; "
        f"its process started {seen['urgent']['starts'][0]['at'] - decided:.2f}s after the decision"
    )
    assert "handed back (preempted by urgent (priority 9))" in logs(fleet, "low")
    assert "preempting low on big" in logs(fleet, "urgent")


def test_a_job_without_checkpoint_or_preemptible_is_never_preempted(fleet):
    low = fleet.publish(job("plain", 1, 12, vram=40))
    running_after_start(fleet, low["plain"])
    urgent = fleet.publish(job("urgent2", 9, 1, vram=60))
    recs = fleet.wait({**low, **urgent}, timeout_s=120)
    seen = fleet.reports(["plain", "urgent2"])
    assert len(seen["plain"]["starts"]) == 1 and recs["plain"].preemptions == 0
    assert seen["urgent2"]["starts"][0]["at"] >= seen["plain"]["end"] - 0.5


def test_a_job_preempted_max_times_runs_to_its_end(fleet):
    low = fleet.publish(job("tired", 1, 16, vram=40, extra='checkpoint = "ckpt/"'))
    running_after(fleet, low["tired"], 2)
    fleet.records().r.hset("fleet:job:" + low["tired"], "preemptions", MAX_PREEMPTIONS)
    urgent = fleet.publish(job("urgent3", 9, 1, vram=60))
    recs = fleet.wait({**low, **urgent}, timeout_s=120)
    seen = fleet.reports(["tired", "urgent3"])
    assert len(seen["tired"]["starts"]) == 1 and recs["tired"].preemptions == MAX_PREEMPTIONS
    assert seen["urgent3"]["starts"][0]["at"] >= seen["tired"]["end"] - 0.5


def test_a_preemptible_job_without_checkpoint_is_handed_back_and_starts_over(fleet, tmp_path):
    # held at step 2 (each run) until it was handed back: still running when the urgent job
    # arrives, however busy the machine
    gate = tmp_path / "gate"
    low = fleet.publish(
        job("scratch", 1, STEPS, vram=40, extra="preemptible = true", hold=(2, gate))
    )
    running_after_start(fleet, low["scratch"])
    urgent = fleet.publish(job("urgent4", 9, 1, vram=60))
    handed_back(fleet, low["scratch"])
    gate.touch()
    recs = fleet.wait({**low, **urgent}, timeout_s=120)
    seen = fleet.reports(["scratch", "urgent4"])
    assert [s["from_step"] for s in seen["scratch"]["starts"]] == [0, 0]
    assert recs["scratch"].preemptions == 1 and seen["scratch"]["digest"] == chain(STEPS)


def running_after_start(fleet, job_id: str) -> None:
    running = lambda: fleet.records().get(job_id).state is JobState.RUNNING  # noqa: E731
    wait_until(f"{short_id(job_id)} starts", running, 60, fleet.logs)
    time.sleep(1.5)


def test_one_host_preempts_for_an_urgent_job_when_several_could(pools, tmp_path):
    pools.env.update(FLEET_CHECKPOINT_EVERY_S="0.5", FLEET_LEASE_TTL_S="5")
    pools.start("big1", BIG)
    pools.start("big2", BIG)
    # both lows hold at step 2 until the urgent job has run: neither can end first and free
    # its host without a preemption, however busy the machine
    gate, ckpt = tmp_path / "gate", 'checkpoint = "ckpt/"'
    lows = pools.publish(
        job("low-a", 1, 8, vram=40, extra=ckpt, hold=(2, gate))
        + job("low-b", 1, 8, vram=40, extra=ckpt + "\nseed = 1", hold=(2, gate))
    )
    for jid in lows.values():
        running_after(pools, jid, 2)
    urgent = pools.publish(job("urgent5", 9, 2, vram=60))
    pools.wait(urgent, timeout_s=120)
    gate.touch()
    recs = pools.wait({**lows, **urgent}, timeout_s=120)
    assert sorted(recs[n].preemptions for n in lows) == [0, 1], "exactly one job made room"
    assert all(r.state is JobState.SUCCEEDED for r in recs.values())
