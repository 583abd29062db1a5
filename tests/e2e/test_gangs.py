"""Gangs (``nodes = N``) on real workers, one per simulated host on loopback: the members
meet through torch.distributed (gloo), a member's death stops and re-runs the gang as a
whole, two gangs on three hosts both finish (also two of different queues on the same
hosts), and a gang preempted on one member's host is handed back whole through rank 0's
checkpoint and resumes from it."""

from __future__ import annotations

import glob
import json
import os
import signal
import subprocess
import sys
import tarfile
import time
import uuid
from pathlib import Path

import psutil
import pytest
import redis
import zstandard

from artifacts.stores import open_store_at
from fleet.local import start_worker, stop_worker
from fleet.redis_server import RedisServer
from state.jobrecord import JobState
from state.records import Records
from state.search.view import read_search
from tests.e2e.ckptjob import chain
from tests.e2e.conftest import wait_for_workers
from tests.harness.cli import fleet_cli
from tests.waiting import wait_until

pytestmark = pytest.mark.e2e
JOB = Path(__file__).with_name("gangjob.py")
CKPT_JOB = Path(__file__).with_name("gangckptjob.py")
TRIAL = Path(__file__).with_name("gangtrial.py")
SLEEPY = Path(__file__).with_name("sleepy.py")
MOONS = Path(__file__).parents[2] / "examples" / "data" / "moons.csv"
ONE_CORE = {"cuda_devices": [], "ram_total_gib": 8, "cpu_cores": 1}  # one job at a time
HOSTS = ("ga", "gb", "gc")


class Gangs:
    def __init__(self, root: Path, env: dict):
        self.root, self.env, self.workers = root, env, {}
        self.counts = root / "counts"
        self.counts.mkdir(exist_ok=True)

    def start(self, *names: str) -> None:
        for name in names:
            self.workers[name] = start_worker(name, ONE_CORE, self.env, self.root / "logs")
        wait_for_workers(self.env, names)

    def publish(self, text: str) -> dict[str, str]:
        path = self.root / f"m-{uuid.uuid4().hex[:6]}.toml"
        path.write_text(text)
        done = self.cli("publish", str(path), "--json")
        return {r["name"]: r["job_id"] or r["search_id"] for r in json.loads(done.stdout)}

    def publish_now(self, text: str) -> dict[str, str]:
        """As ``publish``, in this process: no interpreter to start, for a test that times it."""
        from fleet.manifests import loads
        from fleet.publish import publish
        from tasks import app

        app.conf.broker_url = self.env["FLEET_BROKER_URL"]
        app.pool.force_close_all()
        client = redis.Redis.from_url(self.env["FLEET_BROKER_URL"])
        return {r.job.name: r.job.job_id for r in publish(app, client, loads(text, "m.toml"))}

    def cli(self, *args: str) -> subprocess.CompletedProcess:
        return fleet_cli(self.env, *args, ok=True)

    def records(self) -> Records:
        return Records(redis.Redis.from_url(self.env["FLEET_BROKER_URL"], decode_responses=True))

    def wait(self, ids: dict[str, str], timeout_s: float = 150) -> dict:
        def finished():
            recs = {r.name: r for r in self.records().all() if r.job_id in ids.values()}
            done = len(recs) == len(ids) and all(r.state.terminal for r in recs.values())
            return recs if done else None

        return wait_until("jobs finished", finished, timeout_s, detail=self.logs)

    def run_one(self, text: str, state: JobState) -> tuple[dict[str, str], object]:
        """Publish one job, wait for it, check it ended in ``state``: its IDs and record."""
        ids = self.publish(text)
        [rec] = self.wait(ids).values()
        assert rec.state is state, self.logs()
        return ids, rec

    def reports(self, name: str) -> list[dict]:
        found = self.counts.glob(f"{glob.escape(name)}-rank*.json")
        return [json.loads(p.read_text()) for p in sorted(found)]

    def logs(self) -> str:
        return "\n".join(
            f"--- {p.name}\n{p.read_text(errors='replace')[-3000:]}"
            for p in (self.root / "logs").glob("*.log")
        )


@pytest.fixture(scope="module")
def gangs(tmp_path_factory):
    root = tmp_path_factory.mktemp("gangs")
    server = RedisServer(root / "redis").start()
    env = dict(
        os.environ,
        FLEET_BROKER_URL=server.url,
        FLEET_STORE_URL=f"file://{root / 'store'}",
        FLEET_LEASE_TTL_S="5",
        FLEET_GANG_FORM_TIMEOUT_S="6",
        FLEET_CHECKPOINT_EVERY_S="0.5",
        COUNT_DIR=str(root / "counts"),
    )
    env.pop("FLEET_CAPABILITY", None)
    g = Gangs(root, env)
    try:
        g.start(*HOSTS)
        yield g
    finally:
        for w in g.workers.values():
            stop_worker(w)
        server.stop()


def host_of(cwd: str) -> str:
    """The worker a run's folder belongs to: its work dir is <work dir>/runs/<run>/work."""
    parts = Path(cwd).parts
    return parts[parts.index("runs") - 1]


def bundle_files(gangs: Gangs, rec) -> dict[str, str]:
    store = open_store_at(gangs.env["FLEET_STORE_URL"])
    path = store.get_bundle(
        rec.artifact.get("kind", "command"), rec.artifact["sha256"], gangs.root / "b.tar.zst"
    )
    with open(path, "rb") as raw, zstandard.ZstdDecompressor().stream_reader(raw) as stream:
        with tarfile.open(fileobj=stream, mode="r|") as tar:
            return {m.name: tar.extractfile(m).read().decode() for m in tar if m.isfile()}


def gang(name: str, seconds: float, nodes: int = 2, extra: str = "") -> str:
    return (
        f'[[jobs]]\nname = "{name}"\ncommand = ["{sys.executable}", "{JOB}", "{seconds}"]\n'
        f"nodes = {nodes}\n{extra}\n"
    )


def test_a_two_node_gang_meets_through_torch_distributed_on_two_hosts(gangs):
    ids = gangs.publish(gang("pair", 0))
    rec = gangs.wait(ids)["pair"]
    assert rec.state is JobState.SUCCEEDED, gangs.logs()
    seen = [r for r in gangs.reports("pair") if "sum" in r]
    assert sorted(r["rank"] for r in seen) == [0, 1]
    assert all(r["sum"] == 3.0 and r["world"] == 2 and r["nodes"] == "2" for r in seen)
    # one member per host: each ran in its own worker's work dir
    hosts = {host_of(r["cwd"]) for r in seen}
    assert len(hosts) == 2, seen
    # one record, rank 0's host as its worker, every member's host listed
    raw = gangs.records().r.hgetall("fleet:job:" + ids["pair"])
    assert raw["worker"] == raw["gang_hosts"].split(",")[0]
    assert len(set(raw["gang_hosts"].split(","))) == 2
    assert raw["attempts"] == "1" and raw["runs"] == "1"
    h0, h1 = raw["gang_hosts"].split(",")
    # rank 0's host is reached at the address it advertises (`fleet hosts` shows it)
    hosts = {h["hostname"]: h for h in json.loads(gangs.cli("hosts", "--json").stdout)}
    assert hosts[h0]["addr"] == "127.0.0.1"  # its way to Redis, on loopback
    assert all(r["master"].split(":")[0] == hosts[h0]["addr"] for r in seen)
    [row] = [
        j for j in json.loads(gangs.cli("status", "--json").stdout)["jobs"] if j["name"] == "pair"
    ]
    assert row["gang_hosts"] == [h0, h1] and row["worker"] == h0
    assert f"rank 0 {h0}, rank 1 {h1}" in gangs.cli("show", ids["pair"]).stdout
    # one bundle: rank 0's outputs, its log and rank 1's
    files = bundle_files(gangs, gangs.records().get(ids["pair"]))
    assert files["out/sum.txt"] == "3.0"
    assert "rank 0 of 2: all_reduce sum 3.0" in files["fleet-log.txt"]
    assert "rank 1 of 2: all_reduce sum 3.0" in files["fleet-log-rank1.txt"]


def test_two_gangs_on_three_hosts_both_finish(gangs):
    ids = gangs.publish(gang("left", 2) + gang("right", 2, extra="seed = 1"))
    recs = gangs.wait(ids)
    assert all(r.state is JobState.SUCCEEDED for r in recs.values()), gangs.logs()


def test_two_gangs_published_together_on_two_hosts_both_finish_the_older_first(gangs):
    both = 'allowed_hosts = ["ga", "gb"]\n'
    ids = gangs.publish(
        gang("first", 1, extra=both + "seed = 4\npriority = 6")
        + gang("second", 1, extra=both + "seed = 5")
    )
    recs = gangs.wait(ids)
    assert all(r.state is JobState.SUCCEEDED for r in recs.values()), gangs.logs()
    assert recs["first"].started_at < recs["second"].started_at
    assert all(set(r.gang_hosts.split(",")) == {"ga", "gb"} for r in recs.values())


def test_a_gang_beside_a_stream_of_one_host_jobs_starts_and_so_do_they(gangs):
    small = "".join(
        f'[[jobs]]\nname = "s{i}"\ncommand = ["{sys.executable}", "{SLEEPY}", "0.5"]\nseed = {i}\n'
        for i in range(8)
    )
    ids = gangs.publish(
        small[: len(small) // 2] + gang("among", 1, extra="seed = 3") + small[len(small) // 2 :]
    )
    recs = gangs.wait(ids)
    assert all(r.state is JobState.SUCCEEDED for r in recs.values()), gangs.logs()
    assert len([p for p in gangs.reports("among") if "sum" in p]) == 2


def test_the_mlp_trainer_trains_as_a_two_node_gang_with_rank_0_storing_the_model(gangs):
    ids, rec = gangs.run_one(
        f'[[jobs]]\nname = "mlp2"\nmodel = "mlp"\ndata = "{MOONS}"\nnodes = 2\n'
        "hyper = { epochs = 4, batch_size = 32 }\n",
        JobState.SUCCEEDED,
    )
    raw = gangs.records().r.hgetall("fleet:job:" + ids["mlp2"])
    assert len(set(raw["gang_hosts"].split(","))) == 2
    assert rec.artifact and rec.artifact["sha256"]  # rank 0's outputs, one bundle
    # one world of two processes, one per host, rank 0 reporting (`fleet logs`: rank 0's)
    assert "on cpu x 2 processes" in gangs.cli("logs", ids["mlp2"]).stdout
    # each rank's output is its own: rank 1 ran the trainer too and ended well
    rank1 = gangs.cli("logs", ids["mlp2"], "--rank", "1", "--json").stdout.splitlines()
    ends = [json.loads(x) for x in rank1 if '"event"' in x]
    assert any(e.get("outcome") == "succeeded" for e in ends), rank1


def test_a_gang_whose_members_fail_is_recorded_failed_once_not_rerun(gangs):
    _, rec = gangs.run_one(
        f'[[jobs]]\nname = "bad"\ncommand = ["{sys.executable}", "-c", '
        "\"import sys; print('bad input'); sys.exit(3)\"]\nnodes = 2\n",
        JobState.FAILED,
    )
    assert rec.runs == 1 and rec.end_reason.startswith("exit 3"), rec


def test_why_explains_a_gang_that_cannot_form_and_its_hosts_give_their_seats_back(gangs):
    ids = gangs.publish(gang("four", 0, nodes=4, extra="seed = 6"))
    jid = ids["four"]
    r = gangs.records().r
    wait_until("a seat held", lambda: r.hlen("fleet:gang:" + jid) > 4, 30)
    why = gangs.cli("why", jid).stdout
    assert "gang of 4 hosts: 3 live host(s) qualify" in why, why
    seats = json.loads(gangs.cli("why", jid, "--json").stdout)["gang"]["seats"]
    assert 1 <= len(seats) <= 3
    # a seat is held at most FLEET_GANG_FORM_TIMEOUT_S (6 s here), then given back, saying why
    wait_until("a seat given back", lambda: "gang could not form in 6s" in gangs.logs(), 25)
    gangs.cli("cancel", jid, "--yes")
    # its members go home at once: the hosts serve other work
    small = f'[[jobs]]\nname = "after"\ncommand = ["{sys.executable}", "{SLEEPY}", "0"]\n'
    ids = gangs.publish(small)
    assert gangs.wait(ids, 30)["after"].state is JobState.SUCCEEDED


def test_a_member_killed_mid_run_stops_its_partner_and_the_gang_runs_again_whole(gangs):
    ids = gangs.publish(gang("kill", 8, extra="seed = 2"))
    jid = ids["kill"]
    r = gangs.records().r
    wait_until(
        "the gang running",
        lambda: (
            r.hget("fleet:job:" + jid, "state") == "running"
            and len([p for p in gangs.reports("kill") if "sum" not in p]) >= 2
        ),
        60,
    )
    first = r.hget("fleet:job:" + jid, "gang_hosts").split(",")
    victim = first[1]
    os.killpg(gangs.workers[victim].pid, signal.SIGKILL)
    killed_at = time.time()
    # the partner hears within seconds: the record goes back to its queue for the gang
    wait_until(
        "the gang requeued",
        lambda: (
            r.hget("fleet:job:" + jid, "runs") == "2"
            or r.hget("fleet:job:" + jid, "state") == "queued"
        ),
        60,
    )
    # when, by the partner's own clock (its requeue's queued_at, kept by the next claim): a
    # busy machine's late look at the record is not in it
    requeued_at = float(r.hget("fleet:job:" + jid, "queued_at"))
    assert killed_at < requeued_at < killed_at + 15, requeued_at - killed_at
    try:
        rec = gangs.wait(ids, 150)["kill"]
        assert rec.state is JobState.SUCCEEDED, gangs.logs()
        raw = r.hgetall("fleet:job:" + jid)
        assert raw["runs"] == "2" and raw["attempts"] == "2", raw
        assert victim not in raw["gang_hosts"].split(",")
        # after its success it still says why it ran again, naming the lost member's host
        assert rec.rerun_reason.startswith(f"run 1 lost: gang member rank 1 on {victim}"), (
            rec.rerun_reason,
            victim,
        )
        assert len([p for p in gangs.reports("kill") if "sum" in p]) == 2  # the second run only
    finally:
        gangs.workers[victim].wait()
        gangs.start(victim)


def test_two_gangs_of_different_queues_holding_a_host_each_both_finish_the_older_first(gangs):
    # gb busy: the older gang takes a seat on ga; the younger one, on a queue gb serves first
    # (more demanding), takes gb's once it frees: each gang holds one of the two hosts
    r = gangs.records().r
    both = 'allowed_hosts = ["ga", "gb"]\n'
    # the younger gang's queue exists and is served before gb frees (as a queue in use is)
    warm = f'[[jobs]]\nname = "warm{{}}"\ncommand = ["{sys.executable}", "{SLEEPY}", "0"]\n'
    gangs.wait(
        gangs.publish(warm.format(1) + both + "min_ram_gib = 4\n" + warm.format(2) + both), 30
    )
    # gb stays busy until both gangs are published (a gate, not a length a busy box eats)
    gate = gangs.root / "busy-gb.gate"
    busy = gangs.publish(
        f'[[jobs]]\nname = "busy-gb"\ncommand = ["{sys.executable}", "{SLEEPY}", "until:{gate}"]\n'
        'allowed_hosts = ["gb"]\nseed = 9\n'
    )
    wait_until("gb busy", lambda: r.hget("fleet:job:" + busy["busy-gb"], "state") == "running", 120)
    ids = gangs.publish_now(gang("cpu-gang", 1, extra=both + "seed = 7\npriority = 6"))
    wait_until("a seat held on ga", lambda: r.hlen("fleet:gang:" + ids["cpu-gang"]) > 4, 120)
    ids |= gangs.publish_now(gang("ram-gang", 1, extra=both + "seed = 8\nmin_ram_gib = 4"))
    queues = {n: gangs.records().get(j).pri_queue for n, j in ids.items()}
    assert queues["cpu-gang"] != queues["ram-gang"], queues
    gate.touch()
    recs = gangs.wait({**ids, **busy}, 90)
    assert all(x.state is JobState.SUCCEEDED for x in recs.values()), gangs.logs()
    assert recs["cpu-gang"].started_at < recs["ram-gang"].started_at  # the older one first
    # the younger gang gave gb to the older one at once, which took it next
    logs = "".join(p.read_text(errors="replace") for p in (gangs.root / "logs").glob("*.log"))
    assert any(
        "gave back a seat of ram-gang" in line and "forming on a queue it serves" in line
        for line in logs.splitlines()
    ), logs[-3000:]


def partner_host(r, job_id: str, completer: bool) -> str:
    """The host of a member other than rank 0: the one that filled the gang's last seat (its
    seat is the run's token) or one that did not (its seat is not the record's token)."""
    token = r.hget("fleet:job:" + job_id, "token")
    for field, raw in sorted(r.hgetall("fleet:gang:" + job_id).items()):
        m = json.loads(raw) if field.startswith("m:") and field != "m:0" else None
        if m and (m["seat"] == token) is completer:
            return m["host"]
    raise AssertionError(f"no such member of {job_id}")


@pytest.mark.parametrize(
    ("nodes", "completer"), [(2, True), (3, False)], ids=["last-joiner", "middle-member"]
)
def test_a_gang_preempted_on_one_host_is_handed_back_whole_and_resumes_from_rank_0s_checkpoint(
    gangs, nodes, completer
):
    # on the host of rank 1 that filled the last seat (the run's token is its own seat), and
    # of a member that did not (it halts the gang under the run's token, not its seat's)
    # every rank holds at step 5 until the gate opens, once the gang was handed back: still
    # running when the urgent job arrives, however long a busy machine takes to get there
    steps, name, urgent_name = 12, f"ck{nodes}", f"urgent{nodes}"
    gate = gangs.root / f"gate-{name}"
    hosts = json.dumps(list(HOSTS[:nodes]))
    ids = gangs.publish(
        f'[[jobs]]\nname = "{name}"\ncommand = ["{sys.executable}", "{CKPT_JOB}", "{steps}", '
        f'"0.3", "5", "{gate}"]\nnodes = {nodes}\npriority = 1\ncheckpoint = "ckpt"\n'
        f"allowed_hosts = {hosts}\n"
    )
    jid = ids[name]
    r = gangs.records().r
    key = "fleet:job:" + jid

    def past(step: int) -> bool:
        raw = r.hgetall(key)
        return (
            raw.get("state") == "running"
            and bool(raw.get("checkpoint"))
            and any(
                f"step {n}" in line
                for line in gangs.cli("logs", jid).stdout.splitlines()
                for n in range(step, steps)
            )
        )

    wait_until("the gang past step 5 with a checkpoint", lambda: past(5), 60, detail=gangs.logs)
    target = partner_host(r, jid, completer)  # the urgent job can run only there
    urgent = gangs.publish(
        f'[[jobs]]\nname = "{urgent_name}"\ncommand = ["{sys.executable}", "{SLEEPY}", "5"]\n'
        f'priority = 9\nallowed_hosts = ["{target}"]\nseed = {30 + nodes}\n'
    )
    # the whole gang goes back to its queue uncounted, saying by what
    wait_until(
        "the gang handed back",
        lambda: r.hget(key, "state") == "queued" and r.hget(key, "preempted_by"),
        60,
        detail=gangs.logs,
    )
    gate.touch()  # handed back: the resumed run may pass step 5
    first_run = r.hgetall(key)
    upto = float(first_run["charged"].split()[1])
    held = nodes * int(first_run["cores"]) * (upto - float(first_run["started_at"]))
    assert float(first_run["core_s"]) == pytest.approx(held, rel=1e-6), first_run
    why = gangs.cli("why", jid).stdout
    assert f"preempted by {urgent_name} (priority 9)" in why, why
    assert f"the whole gang of {nodes} stopped, rank 0's checkpoint synced" in why, why
    by = json.loads(r.hget(key, "preempted_by"))
    assert (by["name"], by["host"]) == (urgent_name, target)
    recs = gangs.wait({**ids, **urgent}, 120)
    assert all(x.state is JobState.SUCCEEDED for x in recs.values()), gangs.logs()
    raw = r.hgetall(key)
    # a second run, not a second attempt; the urgent job ran while the gang waited
    assert (raw["runs"], raw["attempts"], raw["preemptions"]) == ("2", "1", "1"), raw
    # fair share charged each run for both members' cores: the first up to its hand-back
    assert float(raw["core_s"]) > float(first_run["core_s"]) > 0
    assert recs[urgent_name].started_at < recs[name].started_at
    took = json.loads(r.hget("fleet:job:" + urgent[urgent_name], "preempted"))
    assert [t["job_id"] for t in took] == [jid]
    # every rank stopped and every one resumed from rank 0's last checkpoint, mid-way
    reports = {
        rank: json.loads((gangs.counts / f"{name}-rank{rank}.json").read_text())
        for rank in range(nodes)
    }
    for rank, report in reports.items():
        assert len(report["starts"]) == 2, (rank, report)
    resumed = {report["starts"][1]["from_step"] for report in reports.values()}
    assert len(resumed) == 1 and 5 <= resumed.pop() < steps, reports
    assert reports[0]["digest"] == chain(steps)  # as if never interrupted


def test_a_sweep_of_gangs_runs_each_point_as_a_gang_of_its_own(gangs):
    ids = gangs.publish(gang("swept", 0, extra="[jobs.sweep]\nseed = [7, 8]"))
    recs = gangs.wait(ids)
    assert len(recs) == 2 and all(r.state is JobState.SUCCEEDED for r in recs.values())
    assert all(len(set(r.gang_hosts.split(","))) == 2 for r in recs.values()), recs
    for name in ids:
        assert len([p for p in gangs.reports(name) if p.get("sum") == 3.0]) == 2


SEARCH = f"""[[jobs]]
name = "gtune"
command = ["{sys.executable}", "{TRIAL}", "8", "0.3"]
nodes = 2
env = {{ FAIL_TRIAL = "2" }}
[jobs.search]
trials = 3
parallel = 1
metric = "loss"
sampler = "random"
pruner = {{ name = "median", n_startup_trials = 1, n_warmup_steps = 1 }}
last_step = 7
[jobs.search.space]
x = {{ low = 0.0, high = 1.0 }}
"""


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_a_search_of_gangs_counts_rank_0_prunes_every_member_and_fails_a_trial_once(gangs):
    sid = gangs.publish(SEARCH)["gtune"]
    r = gangs.records().r
    done = wait_until(
        "the search ends",
        lambda: (v := read_search(r, sid)) and v.done and v,
        150,
        detail=gangs.logs,
    )
    states = [t.state for t in done.trials]
    # trial 0 completes; trial 1, worse at every step, is pruned; trial 2's rank 1 exits 3
    assert states == [JobState.SUCCEEDED, JobState.PRUNED, JobState.FAILED], gangs.logs()
    assert done.counts[JobState.FAILED] == 1 and not done.stopped
    # the trial's values are rank 0's: rank 1 printed -1000 at every step
    assert done.trials[0].value == 0.5 and done.best_value == 0.5
    assert all(v > 0 for t in done.trials for v in t.steps.values()), done.trials
    recs = [gangs.records().get(t.job_id) for t in done.trials]
    assert all(len(set(rec.gang_hosts.split(","))) == 2 for rec in recs[:2]), recs
    assert recs[2].runs == 1 and recs[2].end_reason.startswith("exit"), recs[2]  # once
    # no member of the pruned trial is left running: rank 0 stopped it, rank 1 heard it
    found = gangs.counts.glob(glob.escape("gtune[trial=1]") + "-rank*.pid")
    pids = [int(p.read_text()) for p in found]
    assert len(pids) == 2
    wait_until("the pruned gang's members exited", lambda: not any(map(alive, pids)), 15)
    # results, one row per trial, each on both of its hosts
    board = json.loads(gangs.cli("results", "gtune", "--json").stdout)
    assert sorted(t["trial"] for t in board) == [0, 1, 2]
    best = next(t for t in board if t["best"])
    assert best["trial"] == 0 and best["value"] == 0.5 and " + " in best["host"], best
    assert "gtune" in gangs.cli("results", "gtune", "--csv").stdout
    plotted = gangs.cli("plot", "gtune", "-o", str(gangs.root / "gtune.png")).stdout
    assert "3 trials" in plotted and (gangs.root / "gtune.png").stat().st_size > 0
    # the Optuna export: one trial per gang, each with rank 0's steps only
    optuna = pytest.importorskip("optuna")
    db = f"sqlite:///{gangs.root / 'study.db'}"
    assert "(3 trials)" in gangs.cli("export", "optuna", "gtune", "--storage", db).stdout
    study = optuna.load_study(study_name="gtune", storage=db)
    assert [t.state.name for t in study.trials] == ["COMPLETE", "PRUNED", "FAIL"]
    assert study.best_value == 0.5
    assert all(v > 0 for t in study.trials for v in t.intermediate_values.values())
