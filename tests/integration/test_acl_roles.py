"""Roles as Redis ACL users (state.acl) on a real redis-server with ACLs: what each role's
user may do with the real `fleet` verbs and the worker's own record calls."""

from __future__ import annotations

import json
import uuid

import pytest
import redis as redis_lib

from core import constants as C
from fleet import cli
from state.acl import Role
from state.broker import parse
from state.jobrecord import JobState
from state.records import Records
from state.redis_conn import connect

pytestmark = pytest.mark.integration

MANIFEST = """
[[jobs]]
name = "acl-a"
command = ["true"]

[[jobs]]
name = "acl-b"
command = ["true", "b"]

[[jobs]]
name = "acl-gang"
command = ["true", "g"]
nodes = 2
"""


@pytest.fixture
def as_role(acl_redis, monkeypatch, tmp_path, capsys):
    """Run a `fleet` verb in this process as a role's Redis user: (exit status, stdout, stderr)."""
    app = cli.app()
    before = app.conf.broker_url

    def run(role, *argv: str) -> tuple[int, str, str]:
        url = acl_redis.url(role)
        monkeypatch.setenv("FLEET_BROKER_URL", url)
        app.conf.broker_url = url
        app.pool.force_close_all()
        capsys.readouterr()
        rc = cli.main(list(argv))
        out = capsys.readouterr()
        return rc, out.out, out.err

    yield run
    app.conf.broker_url = before
    app.pool.force_close_all()


@pytest.fixture
def published(as_role, tmp_path) -> dict[str, str]:
    path = tmp_path / "m.toml"
    path.write_text(MANIFEST)
    rc, out, err = as_role(Role.OPERATOR, "publish", str(path), "--json")
    assert rc == 0, err
    return {r["name"]: r["job_id"] for r in json.loads(out)}


def records_as(acl_redis, role) -> Records:
    return Records(connect(parse(acl_redis.url(role))))


def test_an_operator_publishes_cancels_and_requeues(as_role, published, acl_redis):
    assert as_role(Role.OPERATOR, "cancel", "acl-a", "--yes")[0] == 0
    assert as_role(Role.OPERATOR, "requeue", "acl-a", "--yes")[0] == 0
    admin = redis_lib.Redis.from_url(acl_redis.url(), decode_responses=True)
    assert admin.hget(C.JOB_KEY + published["acl-a"], "state") == "queued"


def test_only_an_operator_sets_an_owners_fair_share(as_role, acl_redis):
    for role in (Role.READONLY, Role.WORKER):
        rc, out, err = as_role(role, "share", "set", "alice", "3")
        assert rc == 1 and "Traceback" not in err and "lacks the operator role" in err, (role, err)
    assert as_role(Role.OPERATOR, "share", "set", "alice", "3")[0] == 0
    assert as_role(Role.READONLY, "share", "list")[0] == 0
    admin = redis_lib.Redis.from_url(acl_redis.url(), decode_responses=True)
    assert float(admin.hget(C.SHARES_KEY, "alice")) == 3


def test_a_dashboard_user_reads_status_show_and_hosts_but_cannot_cancel(
    as_role, published, acl_redis
):
    for verb in (
        ("status",),
        ("status", "--json"),
        ("show", "acl-a"),
        ("hosts",),
        ("logs", "acl-a"),
        ("why", "acl-b"),
        ("usage",),
        ("share", "list"),
        ("dead-letter",),
        ("capability",),
    ):
        rc, out, err = as_role(Role.READONLY, *verb)
        assert rc == 0, f"{verb}: {err}"
    rc, out, err = as_role(Role.READONLY, "cancel", "acl-a", "--yes")
    assert rc == 1
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    assert (
        "'fleet-readonly' has the readonly role" in lines[0]
        and "lacks the operator role" in lines[0]
    )
    assert "fleet-operator" in lines[0] and "readonly-pw" not in err
    admin = redis_lib.Redis.from_url(acl_redis.url(), decode_responses=True)
    assert admin.hget(C.JOB_KEY + published["acl-a"], "state") == "queued"


def test_a_worker_user_cannot_publish(as_role, tmp_path, acl_redis):
    path = tmp_path / "m.toml"
    path.write_text(MANIFEST)
    rc, out, err = as_role(Role.WORKER, "publish", str(path))
    assert rc == 1 and "Traceback" not in err
    assert "'fleet-worker' has the worker role" in err and "lacks the operator role" in err
    admin = redis_lib.Redis.from_url(acl_redis.url(), decode_responses=True)
    assert admin.zcard(C.JOBS_INDEX) == 0 and not admin.keys(C.JOB_KEY + "*")


def test_a_worker_user_claims_heartbeats_finishes_and_reaps_but_cannot_write_the_index(
    published, acl_redis
):
    worker = records_as(acl_redis, Role.WORKER)
    job_id = published["acl-a"]
    token = uuid.uuid4().hex
    claim = worker.claim(job_id, "w1", token, {"name": "acl-a"}, "cpu")
    assert claim.run, claim
    assert worker.heartbeat(job_id, token, progress="1") == "ok"
    assert worker.finish(job_id, token, JobState.SUCCEEDED)
    assert worker.reap() == []
    with pytest.raises(redis_lib.exceptions.NoPermissionError):
        worker.r.zadd(C.JOBS_INDEX, {"forged": 1})


def test_a_read_only_user_may_listen_to_events_but_not_publish_any(acl_redis):
    ro = redis_lib.Redis.from_url(acl_redis.url(Role.READONLY))
    pubsub = ro.pubsub()
    pubsub.psubscribe("/0.celeryev/*")
    assert pubsub.get_message(timeout=2)["type"] == "psubscribe"
    pubsub.close()
    with pytest.raises(redis_lib.exceptions.NoPermissionError):
        ro.publish("/0.celeryev/task.revoked", "{}")
    with pytest.raises(redis_lib.exceptions.NoPermissionError):
        ro.set(C.JOB_KEY + "x", "1")


def test_redis_starts_from_the_aclfile_fleet_acl_writes_and_each_role_logs_in(
    tmp_path, monkeypatch, capsys
):
    from fleet.redis_server import RedisServer
    from state import acl

    env = {
        acl.ADMIN_PASSWORD_VAR.name: "adm-pw",
        **{v.name: f"{r.value}-pw" for r, v in acl.PASSWORD_VARS.items()},
    }
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    monkeypatch.delenv("FLEET_BROKER_URL", raising=False)
    path = tmp_path / "acl" / "users.acl"
    assert cli.main(["acl", "--aclfile", str(path)]) == 0
    assert oct(path.stat().st_mode & 0o777) == "0o600" and "worker-pw" not in path.read_text()
    # the server's own start-up check logs in as the default user, with the aclfile's password
    with RedisServer(
        tmp_path / "redis", password="adm-pw", extra_args=("--aclfile", str(path))
    ) as server:
        with pytest.raises(redis_lib.AuthenticationError):
            redis_lib.Redis(port=server.port, password="wrong").ping()
        assert (
            redis_lib.Redis(port=server.port, password="adm-pw").execute_command("ACL", "WHOAMI")
            == b"default"
        )
        for role in acl.Role:
            client = redis_lib.Redis(
                port=server.port, username=acl.USERS[role], password=f"{role.value}-pw"
            )
            assert client.ping()


def test_emptying_the_dead_letter_list_needs_the_operator(as_role, acl_redis):
    admin = redis_lib.Redis.from_url(acl_redis.url(), decode_responses=True)
    admin.lpush(
        C.DEAD_LETTER_KEY, json.dumps({"at": 1, "reason": "not JSON", "queue": "cpu", "entry": "x"})
    )
    rc, out, err = as_role(Role.READONLY, "dead-letter", "--clear")
    assert rc == 1 and "lacks the operator role" in err
    assert as_role(Role.OPERATOR, "dead-letter", "--clear")[0] == 0
    assert admin.llen(C.DEAD_LETTER_KEY) == 0


def test_a_right_the_worker_role_lacks_fails_its_record_write_at_once_naming_the_role(
    published, acl_redis
):
    import threading
    import time

    from tasks import app
    from tasks.retry import RedisRefused, retry_redis

    worker, before = records_as(acl_redis, Role.WORKER), app.conf.broker_url
    app.conf.broker_url = acl_redis.url(Role.WORKER)  # the role the worker's messages name
    try:
        t0 = time.monotonic()
        with pytest.raises(RedisRefused) as refused:  # was: 61 tries over about five minutes
            retry_redis(
                lambda: worker.r.zadd(C.JOBS_INDEX, {"forged": 1}),
                what="index",
                stop=threading.Event(),
            )
        assert time.monotonic() - t0 < 2
    finally:
        app.conf.broker_url = before
    text = str(refused.value)
    assert text.startswith("index: ") and "'fleet-worker' has the worker role" in text
    password = acl_redis.url(Role.WORKER).split("@")[0].rsplit(":", 1)[1]
    assert password not in text


def test_a_worker_user_forms_a_gang_takes_its_seats_and_claims_it(published, acl_redis):
    from state.gang import Answer, Gangs, Member

    client = connect(parse(acl_redis.url(Role.WORKER)))
    gangs, job_id = Gangs(client, beat_ttl_s=5), published["acl-gang"]
    assert gangs.join(job_id, 2, Member(-1, "w1", "10.0.0.1", 1, "s1"))[0] is Answer.WAIT
    assert gangs.join(job_id, 2, Member(-1, "w2", "10.0.0.2", 2, "s2"))[0] is Answer.COMPLETE
    assert Records(client).claim(job_id, "w2", "s2", {"name": "acl-gang"}, "cpu").run
    assert gangs.start(job_id, "s2")[0] is Answer.OK
    assert gangs.beat(job_id, 0, "s1") == (Answer.FORMED, "s2")


def test_a_worker_user_that_ends_an_upstream_releases_its_follower(as_role, tmp_path, acl_redis):
    # the release runs inside the worker's finish script: Redis checks every key it touches
    # (the followers and waits sets, the follower's record and list) against the worker's ACL
    path = tmp_path / "pipeline.toml"
    path.write_text(
        '[[jobs]]\nname = "acl-up"\ncommand = ["true"]\n'
        '[[jobs]]\nname = "acl-next"\ncommand = ["true", "next"]\nafter = ["acl-up"]\n'
    )
    rc, out, err = as_role(Role.OPERATOR, "publish", str(path), "--json")
    assert rc == 0, err
    ids = {r["name"]: r["job_id"] for r in json.loads(out)}
    worker = records_as(acl_redis, Role.WORKER)
    assert worker.claim(ids["acl-up"], "w", "t", {}, "cpu").run
    assert worker.finish(ids["acl-up"], "t", JobState.SUCCEEDED)
    assert worker.get(ids["acl-next"]).state is JobState.QUEUED
