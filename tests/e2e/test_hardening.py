"""Hardening, with real workers on a real Redis: poison entries, messages nobody published,
a broken start-up, and jobs hunting for their worker's secrets."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

import pytest
import redis

from core import constants as C
from fleet.local import start_worker, stop_worker
from fleet.redis_server import RedisServer
from state.deadletter import entries
from state.jobrecord import JobState
from state.records import Records
from tests.harness.cli import CLI_HANG_S
from tests.harness.workers import CPU, CUDA, CUDA_LARGE, wait_for_workers
from tests.waiting import wait_until

pytestmark = pytest.mark.e2e
HUNT = Path(__file__).with_name("hunt.py")
SECRET, BROKER_PASSWORD = "sekrit-xyz", "brokerpass-123"
TIERS = ("cuda-large", "cuda", "cpu")
HOSTS = {"hard-large": CUDA_LARGE, "hard-cuda": CUDA, "hard-cpu": CPU}


class Site:
    """One Redis, a file:// store, workers whose environment holds secrets."""

    def __init__(self, root: Path):
        self.root = root
        self.server = RedisServer(root / "redis").start()
        self.url = f"redis://default:{BROKER_PASSWORD}@127.0.0.1:{self.server.port}/0"
        self.env = dict(
            os.environ,
            FLEET_BROKER_URL=self.url,
            FLEET_STORE_URL=f"file://{root / 'store'}",
            FLEET_LEASE_TTL_S="2",
            AWS_SECRET_ACCESS_KEY=SECRET,
            AWS_ACCESS_KEY_ID="AKIAHARDTEST",
        )
        for k in ("FLEET_CAPABILITY", "FLEET_RESULT_BACKEND", "FLEET_JOB_USER"):
            self.env.pop(k, None)
        self.workers: dict[str, subprocess.Popen] = {}

    def start(
        self, name: str, capability: dict = CPU, wait: bool = True, **extra
    ) -> subprocess.Popen:
        env = dict(self.env, **extra)
        self.workers[name] = start_worker(name, capability, env, self.root / "logs")
        if wait:
            wait_for_workers(env, [name])
        return self.workers[name]

    def start_raw(self, name: str, **extra) -> subprocess.Popen:
        """A worker with exactly this environment (start_worker sets FLEET_CAPABILITY itself)."""
        (self.root / "logs").mkdir(parents=True, exist_ok=True)
        log = open(self.root / "logs" / f"{name}.log", "wb")
        self.workers[name] = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "celery",
                "-A",
                "tasks",
                "worker",
                "-n",
                f"{name}@%h",
                "--without-mingle",
                "--without-gossip",
            ],
            env=dict(self.env, FLEET_WORK_DIR=str(self.root / name), **extra),
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        return self.workers[name]

    def client(self) -> redis.Redis:
        return redis.Redis.from_url(self.url)

    def app(self):
        from tasks import app

        app.conf.broker_url = app.conf.result_backend = self.url
        app.pool.force_close_all()
        return app

    def jobs(self, text: str):
        from fleet.manifests import load

        path = self.root / f"m-{uuid.uuid4().hex[:6]}.toml"
        path.write_text(text)
        return load(path)

    def publish(self, text: str) -> dict[str, str]:
        from fleet.publish import publish

        rows = publish(self.app(), self.client(), self.jobs(text))
        return {r.job.name: r.job.job_id for r in rows}

    def wait(self, ids: dict[str, str], timeout_s: float = 90) -> dict:
        def ended():
            recs = {n: Records(self.client()).get(j) for n, j in ids.items()}
            return all(r.state.terminal for r in recs.values()) and recs

        return wait_until(f"{sorted(ids)} end", ended, timeout_s, self.logs, every_s=0.3)

    def logs(self) -> str:
        return "\n".join(
            f"--- {p.name}\n{p.read_text(errors='replace')[-3000:]}"
            for p in (self.root / "logs").glob("*.log")
        )

    def stop(self) -> None:
        for w in self.workers.values():
            stop_worker(w, timeout_s=15)
        self.server.stop()


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    s = Site(tmp_path_factory.mktemp("hard"))
    try:
        for name, cap in HOSTS.items():
            s.start(name, cap, wait=False)
        wait_for_workers(s.env, HOSTS)
        yield s
    finally:
        s.stop()


@pytest.fixture
def solo(tmp_path):
    s = Site(tmp_path)
    try:
        yield s
    finally:
        s.stop()


def command_job(name: str, argv: list[str], **keys) -> str:
    return (
        f'[[jobs]]\nname = "{name}"\ncommand = {json.dumps(argv)}\nartifacts = ["out/*"]\n'
        + "".join(f"{k} = {json.dumps(v)}\n" for k, v in keys.items())
    )


def tier_keys(queue: str) -> dict[str, int]:
    """The plain list and a priority sub-list of one tier queue (manifest priority 9 and 2)."""
    from fleet.messages import wire_priority

    sep = "\x06\x16"
    return {queue: 9, f"{queue}{sep}{wire_priority(2)}": 2}


def poison_entries(site: Site, queue: str, marker: Path) -> dict[str, str]:
    """One of each kind of poison, as raw entries, with the reason each must be set aside for."""
    from fleet.messages import TAG_PLACEHOLDER, MessageFactory

    app = site.app()
    [stray] = site.jobs(command_job(f"stray-{uuid.uuid4().hex[:6]}", ["touch", str(marker)])).jobs
    with app.connection() as conn:
        good = json.loads(
            MessageFactory(app, conn.default_channel)
            .message(stray, queue)
            .replace(TAG_PLACEHOLDER, f"{stray.job_id}.1")
        )
    no_body = {k: v for k, v in good.items() if k != "body"}
    bad_b64 = dict(good, body="%%% not base64 %%%")
    wrong_task = dict(good, headers=dict(good["headers"], task="evil.task"))
    return {
        "this is { not JSON": "not JSON",
        json.dumps(no_body): "no body",
        json.dumps(bad_b64): "body is not base64",
        json.dumps(wrong_task): "is not fleet.train",
        json.dumps(good): "no record for job",
    }


def test_poison_on_every_tier_queue_is_set_aside_and_every_worker_keeps_serving(site, tmp_path):
    client = site.client()
    marker = tmp_path / "stray-ran"
    pushed = []
    for queue in TIERS:
        for key in tier_keys(queue):
            for raw, reason in poison_entries(site, queue, marker).items():
                client.lpush(key, raw)
                pushed.append((queue, reason))
    needs = {
        "cuda-large": {"require_cuda": True, "min_vram_gib": 24},
        "cuda": {"require_cuda": True},
        "cpu": {},
    }
    ids = site.publish(
        "".join(
            command_job(f"after-{q}", [sys.executable, "-c", "print('ok')"], **needs[q])
            for q in TIERS
        )
    )
    recs = site.wait(ids)
    assert {n: r.state for n, r in recs.items()} == {n: JobState.SUCCEEDED for n in ids}, (
        site.logs()
    )
    wait_until("the dead letters", lambda: client.llen(C.DEAD_LETTER_KEY) >= len(pushed), 30)
    dead = entries(client, limit=1000)
    got = sorted(
        (e["queue"], next((want for _, want in pushed if want in e["reason"]), e["reason"]))
        for e in dead
    )
    assert got == sorted(pushed)
    assert all(site.workers[n].poll() is None for n in HOSTS), site.logs()
    assert not marker.exists()
    assert all(client.llen(k) == 0 for q in TIERS for k in tier_keys(q))
    assert "poison entry on" in site.logs() and "refusing delivery of stray" in site.logs()
    shown = subprocess.run(
        [sys.executable, "-m", "fleet.cli", "dead-letter", "--json", "--limit", "1000"],
        env=site.env,
        capture_output=True,
        text=True,
        timeout=CLI_HANG_S,
        check=True,
    )
    assert len(json.loads(shown.stdout)) == len(pushed)


def test_a_job_hunting_for_its_workers_secrets_finds_none(site, tmp_path):
    ids = site.publish(command_job("hunt", [sys.executable, str(HUNT), SECRET[::-1]]))
    rec = site.wait(ids)["hunt"]
    assert rec.state is JobState.SUCCEEDED, rec.last_error
    found = _found(site, rec, tmp_path)
    assert "PATH=" in found["worker_environ"]  # it did read the worker's environ...
    assert found["watchman_pid"] and "PATH=" in found["watchman_environ"]  # ...and its watchman's
    places = ("own_env", "supervisor_environ", "worker_environ", "worker_cmdline")
    for place in (*places, "watchman_environ", "watchman_cmdline"):
        # ...and got no secret
        assert SECRET not in found[place] and BROKER_PASSWORD not in found[place], place
    _assert_nowhere(site, rec, tmp_path)


def _found(site: Site, rec, tmp_path: Path) -> dict:
    import tarfile

    import zstandard

    from artifacts.stores import open_store_at

    path = open_store_at(site.env["FLEET_STORE_URL"]).get_bundle(
        "command", rec.artifact["sha256"], tmp_path / "b.tar.zst"
    )
    raw = zstandard.ZstdDecompressor().stream_reader(path.open("rb")).read()
    (tmp_path / "b.tar").write_bytes(raw)
    with tarfile.open(tmp_path / "b.tar") as tar:
        return json.loads(tar.extractfile("out/found.json").read())


def _assert_nowhere(site: Site, rec, tmp_path: Path) -> None:
    """Neither secret in the record (every field), the bundle, or the result backend."""
    client = site.client()
    blobs = [
        json.dumps(
            {
                k.decode(): v.decode(errors="replace")
                for k, v in client.hgetall(C.JOB_KEY + rec.job_id).items()
            }
        ),
        (tmp_path / "b.tar").read_bytes().decode(errors="replace"),
        json.dumps(
            [client.get(k).decode(errors="replace") for k in client.keys("celery-task-meta-*")]
        ),
    ]
    for blob in blobs:
        assert SECRET not in blob and BROKER_PASSWORD not in blob


def test_a_worker_with_a_malformed_capability_exits_with_one_line_and_consumes_nothing(solo):
    ids = solo.publish(command_job("waiting", ["true"]))
    bad = solo.start_raw("bad-cap", FLEET_CAPABILITY='{"cuda_devices": "lots"}')
    assert bad.wait(60) != 0
    log = (solo.root / "logs" / "bad-cap.log").read_text()
    lines = [line for line in log.splitlines() if line.strip()]
    assert lines == [
        "fleet: refusing to start: FLEET_CAPABILITY: cuda_devices must be a list of "
        '{"name", "vram_total_gib"} objects ([] for none), got \'lots\''
    ], log
    client = solo.client()
    rec = Records(client).get(ids["waiting"])
    assert rec.state is JobState.QUEUED and rec.attempts == 0
    queued = sum(client.llen(k) for k in client.keys("cpu*") if client.type(k) == b"list")
    assert queued == 1 and client.hlen(C.KOMBU_UNACKED) == 0  # its message untouched


def test_a_worker_whose_job_user_does_not_exist_refuses_to_start(solo):
    bad = solo.start_raw("bad-user", FLEET_JOB_USER="no-such-fleet-user")
    assert bad.wait(60) != 0
    log = (solo.root / "logs" / "bad-user.log").read_text().strip()
    assert log.startswith(
        "fleet: refusing to start: FLEET_JOB_USER='no-such-fleet-user': no such user"
    )
    assert "Traceback" not in log


def test_with_fleet_job_user_a_job_runs_as_that_user_and_cannot_read_the_worker(solo, job_user):
    # reachable by the job user, unlike pytest's tmp
    work = Path(tempfile.mkdtemp(prefix="fleet-jobuser-"))
    work.chmod(0o755)
    try:
        solo.start("as-user", FLEET_JOB_USER=job_user, FLEET_WORK_DIR=str(work / "work"))
        python = shutil.which("python3", path=os.defpath) or sys.executable
        ids = solo.publish(command_job("hunt-as-user", [python, str(HUNT), SECRET[::-1]]))
        rec = solo.wait(ids)["hunt-as-user"]
        assert rec.state is JobState.SUCCEEDED, rec.last_error
        found = _found(solo, rec, work)
        import pwd

        assert found["uid"] == pwd.getpwnam(job_user).pw_uid
        assert found["worker_environ"].startswith("<PermissionError")
        assert found["worker_memory"].startswith("<PermissionError")
        assert found["watchman_memory"].startswith("<PermissionError")  # it holds the secrets
        assert SECRET not in found["own_env"] and "HOME=/nonexistent" in found["own_env"]
        _assert_nowhere(solo, rec, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _from_a_newer_fleet(client: redis.Redis, job_id: str) -> None:
    """Rewrite a queued job's message (and the record's copy) as a newer publisher might
    send it: a spec field this worker does not know, so it fails before its claim."""
    import base64

    rec = {k.decode(): v.decode() for k, v in client.hgetall(C.JOB_KEY + job_id).items()}

    def newer(raw: str) -> str:
        msg = json.loads(raw)
        body = json.loads(base64.b64decode(msg["body"]))
        body[0][0]["from_a_newer_fleet"] = True
        msg["body"] = base64.b64encode(json.dumps(body).encode()).decode()
        return json.dumps(msg)

    queued = client.rpop(rec["cur_key"]).decode()
    client.hset(
        C.JOB_KEY + job_id, mapping={"msg": newer(rec["msg"]), "pri_msg": newer(rec["pri_msg"])}
    )
    client.lpush(rec["cur_key"], newer(queued))


def test_a_delivery_a_real_worker_acks_without_running_stays_recoverable_not_stranded(solo):
    ids = solo.publish(command_job("skewed", ["true"]))
    client = solo.client()
    _from_a_newer_fleet(client, ids["skewed"])
    w = solo.start("skew-w", FLEET_LEASE_TTL_S="1")
    wait_until("two restores", lambda: solo.logs().count("restored") >= 2, 60, every_s=0.5)
    logs = solo.logs()
    # taken, failed before its claim, acked...
    assert logs.count("acked but its job never ran") >= 2, logs
    # ...and given back by the reaper, each time
    assert logs.count(f"{ids['skewed']} restored") >= 2, logs
    rec = Records(client).get(ids["skewed"])
    assert rec.state is JobState.QUEUED and rec.attempts == 0
    assert w.poll() is None
