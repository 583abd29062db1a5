"""Real training stacks as jobs (tests/e2e/stackjob.py): PyTorch Lightning, a Hugging Face
Trainer, torchrun DDP on gloo, scikit-learn with n_jobs=-1 and xgboost, each with its progress
bar on and fleet's glue (trainers/report.py, trainers/lightning.py, trainers/hf.py), on one
simulated 2-core host of one fleet. For each stack, one scenario (``ran``) runs once:

* a search of two trials with its own requirements (one environment, shared): both start at
  once; trial 0 runs to its end, trial 1 (worse at every step, and waiting for trial 0 to end
  after its first epoch) is pruned;
* a checkpointed job preempted by an urgent one, which resumes from the stack's own
  checkpoint, and a job cancelled while it trains.

The tests then hold what fleet says against what the processes recorded from inside
(tests/harness/truth.py): every metric point arrived, nothing of a cancelled, preempted or
pruned run is left, the resumed run ends as trial 0 did, each job used the cores it was given.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from core.constants import JOB_LOG_KEY
from state import history
from state.jobrecord import JobRecord, JobState
from state.search.view import read_search
from tests.fixtures.wheels import make_wheel, offline_index
from tests.harness import truth
from tests.harness.chaos import Chaos, chaos_fleet
from tests.harness.manifests import command_job
from tests.waiting import wait_until

# a stack's scenario runs in its first test's set-up: a few minutes on a loaded 2-core box
pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]
JOB = Path(__file__).with_name("stackjob.py")
HOST = {"cuda_devices": [], "ram_total_gib": 8, "cpu_cores": 2}
EPOCHS = 5
# seconds a step: an epoch takes about a quarter of a second (jobs hold at a gate, stackjob.py,
# where a test must stop them mid-training)
PAUSE = {"lightning": 0.05, "hf": 0.05, "ddp": 0.1, "sklearn": 0.2, "xgboost": 0.2}
STACKS = tuple(PAUSE)
BATCHES = {"lightning": 4, "hf": 4}  # these report the global step; the others the epoch
REQUIREMENTS = ["fleettoy==1.0"]  # a job environment of its own, shared by every stack job
SLACK_S = 1.0  # the most a record's run may start before its process and end after it


def steps(stack: str) -> list[int]:
    """The steps a whole run reports, one a epoch."""
    n = BATCHES.get(stack)
    return [n * (e + 1) for e in range(EPOCHS)] if n else list(range(EPOCHS))


def argv(stack: str) -> list[str]:
    return ["python", str(JOB), stack, str(PAUSE[stack])]


def stack_job(stack: str, name: str, env: dict, gate: str = "", **keys) -> str:
    """``gate="hold"``: the job's first run holds after its first epoch until it is stopped."""
    truth_file = json.dumps(env["TRUTH_FILE"])  # inline tables: TOML's, not JSON's
    return command_job(name, argv(stack), requirements=REQUIREMENTS, **keys) + (
        f"hyper = {{ epochs = {EPOCHS} }}\n"
        f'env = {{ TRUTH_FILE = {truth_file}, STACK_GATE = "{gate}" }}\n'
    )


def search(stack: str, env: dict) -> str:
    last = steps(stack)[-1]
    return stack_job(stack, f"{stack}-tune", env) + (
        '[jobs.search]\ntrials = 2\nparallel = 2\nmetric = "loss"\nsampler = "random"\n'
        'pruner = { name = "median", n_startup_trials = 1, n_warmup_steps = 0 }\n'
        f"last_step = {last}\n[jobs.search.space]\nx = {{ low = 0.0, high = 1.0 }}\n"
    )


@dataclass
class Ran:
    """One stack's scenario, ended: the records and what the processes recorded."""

    stack: str
    chaos: Chaos
    trials: list[JobRecord]  # trial 0 whole, trial 1 pruned
    victim: JobRecord  # preempted once, resumed
    doomed: JobRecord  # cancelled while it trained
    seen: dict[str, truth.Seen]
    left: dict[str, list[int]]  # the processes of each stopped run still alive after it ended
    exits: truth.Exits  # when each job's processes exited

    def of(self, rec: JobRecord) -> truth.Seen:
        return self.seen[rec.name]

    def ended(self, rec: JobRecord) -> float:
        """When the last run's process of ``rec`` exited."""
        at = self.exits.ended(self.of(rec))[-1]
        assert at is not None, f"{rec.name}'s process was not seen to end"
        return at


@pytest.fixture(scope="module")
def fleet(tmp_path_factory, s3_server):
    root = tmp_path_factory.mktemp("stacks")
    wheels = root / "wheels"
    make_wheel(wheels)
    with pytest.MonkeyPatch.context() as mp, chaos_fleet(root, s3_server, mp) as chaos:
        chaos.env.update(offline_index(wheels), FLEET_CHECKPOINT_EVERY_S="0.5")
        chaos.env["TRUTH_FILE"] = str(root / "truth.jsonl")
        chaos.start("stacks", capability=HOST)
        exits = truth.Exits(Path(chaos.env["TRUTH_FILE"]))
        # build the shared environment once, so that no stack job waits for uv
        warm = root / "warm.toml"
        warm.write_text(
            command_job("warm", ["python", "-c", "print(1)"], requirements=REQUIREMENTS)
        )
        chaos.wait(chaos.publish(warm), timeout_s=180)
        yield chaos, exits
        exits.stop()


def publish(chaos: Chaos, text: str) -> dict[str, str]:
    path = chaos.root / f"m-{os.urandom(3).hex()}.toml"
    path.write_text(text)
    return chaos.publish(path)


KILL_SETTLE_S = 2.0  # for the kernel to end processes a SIGKILL already reached


def still_alive(chaos: Chaos, name: str, job_id: str) -> list[int]:
    """The processes of ``name``'s first run still running once that run's end is in the job's
    log. A run writes its end mark only after its process group is gone (SIGTERM, then SIGKILL
    after KILL_GRACE_S, tasks/runner.py): whatever the machine's load, none may be left then.
    (A window from the record's end would measure the worker's tick and the grace instead.)"""
    pids = truth.read(Path(chaos.env["TRUTH_FILE"]))[name]
    wait_for(chaos, f"{name}'s first run's end mark", lambda: first_end(chaos, job_id))
    try:
        wait_until(f"{name}'s processes end", lambda: not pids.alive(), KILL_SETTLE_S)
    except AssertionError:
        pass
    return pids.alive()


def first_end(chaos: Chaos, job_id: str) -> dict | None:
    """The end mark of the job's first run in its log, once written."""
    marks = chaos.client().xrange(JOB_LOG_KEY + job_id)
    return next((f for _, f in marks if f.get(b"ev") == b"end" and f.get(b"run") == b"1"), None)


def record(chaos: Chaos, job_id: str) -> JobRecord:
    return chaos.records().get(job_id)


def wait_for(chaos: Chaos, what: str, check, timeout_s: float = 180):
    return wait_until(what, check, timeout_s, chaos.logs, every_s=0.2)


# each stack a group of its own: the test processes share them out, each starting the fleet once
@pytest.fixture(
    scope="module",
    params=[pytest.param(s, marks=pytest.mark.xdist_group(f"stacks-{s}")) for s in STACKS],
)
def ran(request, fleet) -> Ran:
    (chaos, exits), stack, left = fleet, request.param, {}
    env = chaos.env
    # a search: two trials at once in one environment, the slower worse one pruned
    sid = publish(chaos, search(stack, env))[f"{stack}-tune"]
    done = wait_for(
        chaos, "the search ends", lambda: (v := read_search(chaos.client(), sid)).done and v
    )
    trials = [record(chaos, t.job_id) for t in done.trials]
    left[trials[1].name] = still_alive(chaos, trials[1].name, trials[1].job_id)
    # a checkpointed job preempted, and a job cancelled, side by side
    ids = publish(
        chaos,
        stack_job(stack, f"{stack}-victim", env, "hold", checkpoint="ckpt/", priority=1)
        + stack_job(stack, f"{stack}-doomed", env, "hold", priority=5, seed=1),
    )
    victim, doomed = ids[f"{stack}-victim"], ids[f"{stack}-doomed"]
    wait_for(
        chaos,
        "the doomed job trains",
        lambda: (record(chaos, doomed).progress or {}).get("metrics"),
    )
    chaos.fleet("cancel", doomed, "--yes")
    wait_for(chaos, "the doomed job is cancelled", lambda: record(chaos, doomed).state.terminal)
    left[f"{stack}-doomed"] = still_alive(chaos, f"{stack}-doomed", doomed)

    def checkpointed():
        rec = record(chaos, victim)
        return (
            rec.state is JobState.RUNNING and rec.checkpoint and (rec.progress or {}).get("metrics")
        )

    wait_for(chaos, "the victim has a checkpoint", checkpointed)
    urgent = command_job(
        f"{stack}-urgent",
        # the stack in its argv: a job's ID is its content, not its name
        [sys.executable, "-c", "import time; time.sleep(3)", stack],
        priority=9,
        min_cores=2,
    )
    ids.update(publish(chaos, urgent))
    wait_for(chaos, "the victim is preempted", lambda: record(chaos, victim).preemptions >= 1)
    left[f"{stack}-victim"] = still_alive(chaos, f"{stack}-victim", victim)
    chaos.wait(
        {f"{stack}-victim": victim, f"{stack}-urgent": ids[f"{stack}-urgent"]}, timeout_s=180
    )
    return Ran(
        stack,
        chaos,
        trials,
        record(chaos, victim),
        record(chaos, doomed),
        truth.read(Path(env["TRUTH_FILE"])),
        left,
        exits,
    )


def test_every_metric_point_arrives_with_the_bar_on(ran):
    whole = ran.trials[0]
    assert whole.state is JobState.SUCCEEDED, whole.end_reason
    points = history.by_step(history.read(ran.chaos.client(), whole.job_id))
    got = [p["step"] for p in points if "loss" in p]
    assert got == steps(ran.stack), points


def test_a_cancel_a_preemption_and_a_pruning_leave_no_process_of_the_job(ran):
    assert ran.doomed.state is JobState.CANCELLED
    assert ran.trials[1].state is JobState.PRUNED, ran.trials[1].end_reason
    assert ran.victim.preemptions == 1
    assert all(ran.of(r).pids for r in (ran.doomed, ran.trials[1], ran.victim))
    assert ran.left == {name: [] for name in ran.left}, "processes outlived their run"


def test_a_preempted_run_resumes_from_its_checkpoint_and_ends_as_an_uninterrupted_one(ran):
    victim, whole = ran.of(ran.victim), ran.of(ran.trials[0])
    assert ran.victim.state is JobState.SUCCEEDED, ran.victim.end_reason
    assert len(victim.starts) == 2 and ran.victim.runs == 2
    resumed = [n["resumed_from"] for n in victim.notes if "resumed_from" in n]
    assert resumed[0] == 0 and resumed[1] > 0, "the second run started from its checkpoint"
    assert victim.note("result") == pytest.approx(whole.note("result"), rel=1e-5)


def test_the_job_uses_the_cores_it_was_given_not_the_hosts(ran):
    for rec in (ran.trials[0], ran.victim):
        assert rec.cores == 1
        noted = [n for n in ran.of(rec).notes if "threads" in n]
        assert noted, ran.of(rec).notes
        for n in noted:  # each process of the job (torchrun: each rank)
            if (os.cpu_count() or 1) >= HOST["cpu_cores"]:  # the host's cores are real here
                assert len(n["affinity"]) == 1, n
            assert n.get("torch_threads", 1) == 1, n
            assert n.get("n_jobs", 1) == 1, n
            assert all(v == 1 for v in n.get("pools", {}).values()), n


def test_two_jobs_sharing_an_environment_start_at_once_and_when_their_records_say(ran):
    a, b = ran.trials
    sa, sb = ran.of(a).starts[0], ran.of(b).starts[0]
    assert abs(sa - sb) <= SLACK_S, (sa, sb)
    assert sb < ran.ended(a), "the two trials ran at the same time"
    for rec in ran.trials:
        assert abs(rec.started_at - ran.of(rec).starts[0]) <= SLACK_S, rec.name


def test_what_the_records_say_matches_what_the_processes_did(ran):
    # each record's last run against its last process, on the worker's and the kernel's
    # clocks, the exit bounded by the test's looks (truth.Exits): a busy machine moves neither
    windows = {
        r.name: ran.exits.window(ran.of(r), r.started_at, r.finished_at, run=-1)
        for r in (ran.trials[0], ran.victim)
    }
    lags = {n: tuple(round(g, 3) for g in w.lags()) for n, w in windows.items()}
    whole = ran.trials[0]
    print(
        f"\n{ran.stack}: record before process start, after its exit (at least), s: {lags}; "
        f"core_s {whole.core_s:.2f} on {whole.cores} core(s)"
    )
    assert {n: w for n, w in windows.items() if not w.covers()} == {}
    assert all(g <= SLACK_S for pair in lags.values() for g in pair), lags
    # charged from the record's start to just before its finish: the process's life inside
    w = windows[whole.name]
    held_s = whole.finished_at - whole.started_at
    assert whole.cores * (w.alive - w.start) <= whole.core_s <= whole.cores * held_s, (whole, w)
