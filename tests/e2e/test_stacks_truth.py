"""What fleet says, checked against what the processes did (tests/harness/truth.py), for a
mixed workload on one host: two jobs sharing an environment, two sharing a dataset, one on a
simulated GPU, and a search with its own requirements. For each job: its record's run
(``started_at`` to ``finished_at``) holds its process's whole life, starts at most SLACK_S
before it and ends at most SLACK_S after it, its core-seconds are its cores times a time
between the two, `fleet status --json` shows the record's times, Flower's Started time is
within SLACK_S of the process's start, and no process of it is left after its end.

SLACK_S is what fleet adds to a run on the worker: its claim to its fork, its process's exit
to its finish. It is measured on the worker's and the kernel's clocks (a record's times, a
process's start), and the exit is bounded by looks that only a late look can move the lenient
way (``truth.Exits``): no test clock is in it, so a busy machine slows the jobs, not the
check."""

from __future__ import annotations

import json
import socket
import sys
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import pytest

from fleet.local import start_worker
from state import history
from state.jobrecord import JobRecord, JobState
from state.search.view import read_search
from tests.fixtures.wheels import make_wheel, offline_index
from tests.harness import truth
from tests.harness.chaos import chaos_fleet
from tests.harness.cli import fleet_cli
from tests.harness.flower import PASSWORD, USER, Watched, start_flower, stop_flower
from tests.harness.workers import wait_for_workers
from tests.waiting import wait_until

pytestmark = pytest.mark.e2e
JOB = Path(__file__).with_name("stackjob.py")
HOST = {
    "cuda_devices": [{"name": "sim-24GB", "vram_total_gib": 24}],
    "ram_total_gib": 16,
    "cpu_cores": 8,
}
SLACK_S = 1.0  # the most a record's run may start before its process and end after it
SHOWN_S = 0.001  # fleet status --json gives the record's times to the millisecond
EPOCHS, PAUSE = 6, 0.3  # about 2 s a job
PARALLEL = 2


def job(name: str, *extra: str, env: dict, stack: str = "plain", **keys) -> str:
    # "python" is the job environment's; without one, a command names its interpreter
    python = "python" if "requirements" in keys else sys.executable
    text = (
        f'[[jobs]]\nname = "{name}"\ncommand = ["{python}", "{JOB}", "{stack}", "{PAUSE}"]\n'
        f"hyper = {{ epochs = {EPOCHS} }}\n"
        f"env = {{ TRUTH_FILE = {json.dumps(env['TRUTH_FILE'])} }}\n"
    )
    return text + "".join(f"{k} = {json.dumps(v)}\n" for k, v in keys.items()) + "".join(extra)


def workload(env: dict) -> str:
    own = {"requirements": ["fleettoy==1.0"]}
    return (
        job("env-a", env=env, **own)
        + job("env-b", env=env, seed=1, **own)
        + job("data-a", env=env, data="data.csv")
        + job("data-b", env=env, data="data.csv", seed=1)
        + job("gpu", env=env, require_cuda=True, min_vram_gib=8)
        + job("barred", env=env, stack="barred")
        + job(
            "tune",
            f'[jobs.search]\ntrials = 4\nparallel = {PARALLEL}\nmetric = "loss"\n'
            'sampler = "random"\n[jobs.search.space]\nx = { low = 0.0, high = 1.0 }\n',
            env=env,
            **own,
        )
    )


@dataclass(frozen=True)
class Mixed:
    """The workload, ended: each job's record, what its processes recorded, `fleet status
    --json`, Flower's task, by job name; and the fleet's Redis."""

    recs: dict[str, JobRecord]
    seen: dict[str, truth.Seen]
    status: dict
    tasks: dict[str, dict]
    client: object
    windows: dict[str, truth.Window]  # each job's record against its process (truth.Exits)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def ran(tmp_path_factory, s3_server):
    root = tmp_path_factory.mktemp("truth")
    make_wheel(root / "wheels")
    with pytest.MonkeyPatch.context() as mp, chaos_fleet(root, s3_server, mp) as chaos:
        env = chaos.env
        env.update(offline_index(root / "wheels"), TRUTH_FILE=str(root / "truth.jsonl"))
        env["FLOWER_BASIC_AUTH"] = f"{USER}:{PASSWORD}"
        for var in ("FLOWER_UNAUTHENTICATED", "FLOWER_ADDRESS"):
            env.pop(var, None)
        (root / "logs").mkdir(exist_ok=True)
        port = free_port()
        flower = start_flower(env, port, root / "logs" / "flower.log")
        try:
            w = Watched(env, f"http://127.0.0.1:{port}", root, chaos.redis.url, flower.pid)
            chaos.workers["mixed"] = start_worker("mixed", HOST, env, root / "logs")
            wait_for_workers(env, ["mixed"])
            wait_until("Flower starts", w.up, 120, w.logs)
            # the environment built once before: jobs that share it then start at once
            (root / "warm.toml").write_text(
                '[[jobs]]\nname = "warm"\ncommand = ["python", "-c", "print(1)"]\n'
                'requirements = ["fleettoy==1.0"]\n'
            )
            chaos.wait(chaos.publish(root / "warm.toml"), timeout_s=120)
            exits = truth.Exits(root / "truth.jsonl")
            (root / "data.csv").write_text("x,y\n" + "".join(f"{i},{i % 2}\n" for i in range(99)))
            (root / "mixed.toml").write_text(workload(env))
            ids = chaos.publish(root / "mixed.toml")
            sid = ids.pop("tune")
            done = wait_until(
                "the search ends",
                lambda: (v := read_search(chaos.client(), sid)).done and v,
                180,
                chaos.logs,
            )
            ids.update({f"tune[trial={t.number}]": t.job_id for t in done.trials})
            recs = chaos.wait(ids, timeout_s=180)
            status = json.loads(fleet_cli(env, "status", "--json", ok=True).stdout)
            tasks = {n: w.wait_task(j, lambda t: t.get("succeeded")) for n, j in ids.items()}
            wait_until("every job's process exits", lambda: not exits.watching, 30)
            exits.stop()
            seen = truth.read(root / "truth.jsonl")
            windows = {
                n: exits.window(seen[n], r.started_at, r.finished_at) for n, r in recs.items()
            }
            yield Mixed(recs, seen, status, tasks, chaos.client(), windows)
        finally:
            stop_flower(flower)


def test_every_job_of_the_mixed_workload_succeeds_with_its_process_recorded(ran):
    assert all(r.state is JobState.SUCCEEDED for r in ran.recs.values()), ran.recs
    assert all(len(ran.seen[n].starts) == 1 == len(ran.seen[n].ends) for n in ran.recs)


def test_the_records_start_and_end_when_the_processes_did(ran):
    assert {n: w for n, w in ran.windows.items() if not w.covers()} == {}
    lags = {n: tuple(round(g, 3) for g in w.lags()) for n, w in ran.windows.items()}
    print(f"\nrecord before process start, after its exit (at least), s: {lags}")
    assert all(g <= SLACK_S for pair in lags.values() for g in pair), lags


def test_core_seconds_are_the_cores_times_how_long_the_processes_ran(ran):
    for n, r in ran.recs.items():
        w = ran.windows[n]
        # charged from the record's start to just before its finish, the process's life inside
        # (how much before and after: the lags above)
        held_s = r.finished_at - r.started_at
        assert r.cores * (w.alive - w.start) <= r.core_s <= r.cores * held_s, (n, r.core_s, w)


def iso(text: str) -> float:
    return datetime.fromisoformat(text).timestamp()


def test_fleet_status_shows_when_each_record_says_its_job_started_and_ended(ran):
    rows = {row["name"]: row for row in ran.status["jobs"]}
    assert set(ran.recs) - set(rows) == {n for n in ran.recs if n.startswith("tune[")}
    for n in rows.keys() & ran.recs.keys():  # a search's trials are its one row
        rec = ran.recs[n]
        # the record's times, milliseconds kept (the record against the process: above)
        for shown, recorded in (
            (rows[n]["started_at"], rec.started_at),
            (rows[n]["finished_at"], rec.finished_at),
        ):
            assert abs(iso(shown) - recorded) <= SHOWN_S, (n, shown, recorded)


def test_flowers_started_time_is_when_each_process_started(ran):
    # the worker's clock (its task's started event) against the kernel's: no test clock
    for n in ran.recs:
        assert abs(ran.tasks[n]["started"] - ran.seen[n].starts[0]) <= SLACK_S, (n, ran.tasks[n])


def test_jobs_sharing_an_environment_start_within_a_second_of_each_other(ran):
    assert abs(ran.seen["env-a"].starts[0] - ran.seen["env-b"].starts[0]) <= SLACK_S


def test_a_search_with_its_own_requirements_runs_parallel_trials_at_once(ran):
    trials = [s for n, s in ran.seen.items() if n.startswith("tune[")]
    # each alive from its start to its last look (it ended after that): overlaps certain
    edges = sorted(
        [(s.starts[0], 1) for s in trials] + [(ran.windows[s.job].alive, -1) for s in trials]
    )
    now = peak = 0
    for _, d in edges:
        now += d
        peak = max(peak, now)
    assert peak == PARALLEL, edges


def test_no_process_of_any_job_is_left_after_its_end(ran):
    assert {n: ran.seen[n].alive() for n in ran.recs} == {n: [] for n in ran.recs}


def test_jobs_sharing_a_dataset_both_read_it(ran):
    size = ran.seen["data-a"].note("result")
    assert size == ran.seen["data-b"].note("result") and size > 100  # data.csv's bytes


def test_metric_lines_printed_plainly_behind_a_tqdm_bar_all_arrive(ran):
    points = history.by_step(history.read(ran.client, ran.recs["barred"].job_id))
    assert [p["step"] for p in points] == list(range(EPOCHS)), points
