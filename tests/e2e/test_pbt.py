"""Population-based training driven by the fleet itself: four members on two hosts, one host
killed with -9 after the first exploit and Redis restarted after the next. The search finishes
by itself; every exploit is applied once; and each exploited member's next run says, from
inside the job, that it resumed from its donor's checkpoint at or after the boundary, with its
new values."""

from __future__ import annotations

import json
import os
import signal
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import redis

from fleet.redis_server import RedisServer
from manifest.search.spec import trial_job_id
from state.jobrecord import JobState
from state.search import pbt
from state.search.view import read_search
from tests.harness.chaos import Chaos, chaos_fleet
from tests.waiting import wait_until

pytestmark = pytest.mark.e2e
JOB = Path(__file__).with_name("pbtjob.py")
HOST = {"cuda_devices": [], "ram_total_gib": 8, "cpu_cores": 4}
POPULATION, LAST, INTERVAL, PAUSE_S = 4, 60, 10, 0.12


def manifest(chaos, starts: Path, last: int = LAST) -> Path:
    path = chaos.root / "pbt.toml"
    path.write_text(f'''[[jobs]]
name = "pop"
command = ["{sys.executable}", "{JOB}", "{PAUSE_S}", "{starts}"]
checkpoint = "ckpt/"
hyper = {{ last_step = {last} }}
[jobs.search]
metric = "loss"
direction = "minimize"
population = {POPULATION}
last_step = {last}
seed = 3
scheduler = {{ name = "pbt", interval = {INTERVAL}, quantile = 0.5, resample_probability = 0.25 }}
[jobs.search.space]
lr = {{ low = 0.005, high = 0.2, log = true }}
''')
    return path


@dataclass(frozen=True)
class Finished:
    chaos: Chaos
    sid: str
    done: object  # the search's view once it finished
    exploits: list  # state.search.pbt.Exploit, in the order applied
    members: list  # state.search.pbt.Member
    decided: dict  # member -> {step: decision} (the decided hashes)
    void: dict  # member -> ["<step>:void", ...]: exploits voided, their donor gone
    starts: list  # every start of a member's process, as it wrote it
    restarted_mid_search: bool  # Redis restarted before the search was done


@pytest.fixture(scope="module")
def population(tmp_path_factory, s3_server):
    """The search the tests below look at: run once and shared, as no test changes it."""
    root = tmp_path_factory.mktemp("pbt")
    starts = root / "starts.jsonl"
    with pytest.MonkeyPatch.context() as mp, chaos_fleet(root, s3_server, mp) as chaos:
        chaos.env.update(FLEET_CHECKPOINT_EVERY_S="0.5")
        for h in ("pbt-a", "pbt-b"):
            chaos.start(h, capability=HOST)
        sid = chaos.publish(manifest(chaos, starts))["pop"]

        def exploits() -> int:
            try:
                return chaos.client().llen(pbt.key(sid, "exploits"))
            except redis.ConnectionError:  # Redis restarting: look again
                return -1

        def furthest() -> int:
            return max((m.step or 0) for m in pbt.fetch_members(chaos.client(), sid, POPULATION))

        def finished():
            try:
                v = read_search(chaos.client(), sid)
            except redis.ConnectionError:
                return None
            return v.done and v

        wait_until("a first exploit", lambda: exploits() >= 1, 90, chaos.logs)
        os.kill(chaos.workers["pbt-a"].pid, signal.SIGKILL)  # its runs go on by their leases
        chaos.workers["pbt-a"].wait()
        at_kill = furthest()
        wait_until("a boundary past the kill's", lambda: furthest() > at_kill, 90, chaos.logs)
        mid_search = not finished()
        port, data = chaos.redis.port, chaos.redis.data_dir
        chaos.redis.stop()
        chaos.redis = RedisServer(data, port=port).start()
        chaos.start("pbt-a", wait=False, capability=HOST)

        done = wait_until("the search ends", finished, 240, chaos.logs)
        r = chaos.client()
        decided = {
            n: {k.decode(): json.loads(v) for k, v in r.hgetall(pbt.key(sid, "decided", n)).items()
                if b":" not in k}
            for n in range(POPULATION)
        }  # fmt: skip
        void = {
            n: [k.decode() for k in r.hkeys(pbt.key(sid, "decided", n)) if k.endswith(b":void")]
            for n in range(POPULATION)
        }
        yield Finished(
            chaos,
            sid,
            done,
            pbt.fetch_exploits(r, sid),
            pbt.fetch_members(r, sid, POPULATION),
            decided,
            void,
            [json.loads(line) for line in starts.read_text().splitlines()],
            mid_search,
        )


def test_the_search_finishes_by_itself_through_a_kill_and_a_redis_restart(population):
    done = population.done
    assert population.restarted_mid_search
    assert (done.issued, done.ended, done.running) == (POPULATION, POPULATION, 0), done
    assert done.counts[JobState.SUCCEEDED] == POPULATION
    assert all(m.phase is pbt.Phase.DONE for m in population.members), population.members
    best = population.members[done.best_trial]
    assert best.schedule and best.schedule[0].step == 0  # the result: its whole schedule


def test_every_exploit_is_applied_once(population):
    applied = [(e.member, e.step) for e in population.exploits]
    assert len(applied) == len(set(applied)) >= 1, applied
    decided = {
        (n, int(s)) for n, ds in population.decided.items() for s, d in ds.items()
        if d["kind"] == "exploit"
    }  # fmt: skip
    voided = {
        (n, int(s.split(":")[0])) for n, ds in population.void.items() for s in ds
    }  # its donor ended before it could be copied
    # every exploit decided was applied or voided: none lost to the kill or the restart
    assert decided == set(applied) | voided and not set(applied) & voided, (decided, applied)
    for m in population.members:
        assert m.exploits == sum(1 for e in population.exploits if e.member == m.number)
        assert len(m.schedule) == m.exploits + 1


def next_run(population, e) -> dict:
    """The first start of exploit ``e``'s member after it was applied, as the job wrote it."""
    after = [s for s in population.starts if s["member"] == e.member and s["t"] >= e.applied_at]
    assert after, (e, population.starts)
    return min(after, key=lambda s: s["t"])


def writers(population, member: int, before: float) -> set[int]:
    """Whose bytes ``member``'s checkpoint may hold when copied before ``before``: its own,
    or, through the exploits applied to it earlier, its donors' (and theirs). An exploit
    copies its donor's latest checkpoint between its decision and its applying, so a donor
    exploited itself in that gap passes on what it took."""
    out = {member}
    for f in population.exploits:
        if f.member == member and f.applied_at < before:
            out |= writers(population, f.donor, f.applied_at)
    return out


def test_each_exploited_run_resumed_from_its_donors_checkpoint_at_or_after_the_boundary(
    population,
):
    for e in population.exploits:
        run = next_run(population, e)
        # the job's own checkpoint says its step and who wrote it: the donor (or a member
        # whose checkpoint the donor took), at or after the boundary
        assert run["resumed"]["step"] >= e.checkpoint_step >= e.step, (e, run)
        assert run["resumed"]["member"] in writers(population, e.donor, e.applied_at), (e, run)
        assert run["lr"] == pytest.approx(e.new["lr"])  # and it runs with its new values
        donor_job, own = (trial_job_id(population.sid, n) for n in (e.donor, e.member))
        assert e.checkpoint["donor_key"].startswith(f"checkpoints/{donor_job}/")
        assert e.checkpoint["key"].startswith(f"checkpoints/{own}/")


def test_an_exploit_costs_about_two_seconds_from_its_decision_to_the_members_new_run(population):
    costs = [next_run(population, e)["t"] - e.decided_at for e in population.exploits]
    applied = [e.applied_at - e.decided_at for e in population.exploits]
    print(
        f"\nexploit, n={len(costs)}: decision -> applied (stopped, donor's checkpoint copied, "
        f"requeued) p50={statistics.median(applied):.2f}s max={max(applied):.2f}s; "
        f"decision -> the member's new process started p50={statistics.median(costs):.2f}s "
        f"max={max(costs):.2f}s"
    )
    assert costs and all(c > 0 for c in costs)


def test_members_behind_run_first_when_the_population_exceeds_the_hosts(chaos):
    """Two slots for four members: the first two yield their host at their first boundary to
    the two never started, so all four start before any ends."""
    starts = chaos.root / "starts.jsonl"
    chaos.env.update(FLEET_CHECKPOINT_EVERY_S="0.5")
    chaos.start("pbt-one", capability={**HOST, "cpu_cores": 2})
    sid = chaos.publish(manifest(chaos, starts, last=30))["pop"]
    wait_until("the search ends", lambda: read_search(chaos.client(), sid).done, 240, chaos.logs)
    recs = [chaos.records().get(trial_job_id(sid, n)) for n in range(POPULATION)]
    assert all(r.state is JobState.SUCCEEDED for r in recs), [r.state for r in recs]
    runs = [json.loads(line) for line in starts.read_text().splitlines()]
    first_start = {n: min(s["t"] for s in runs if s["member"] == n) for n in range(POPULATION)}
    assert max(first_start.values()) < min(r.finished_at for r in recs), (first_start, runs)
    log = (chaos.root / "logs" / "pbt-one.log").read_text()
    assert "members behind it run first" in log
