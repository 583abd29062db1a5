"""Owners on a real Redis: two people publish, `status --owner` keeps each one's jobs, a
re-publish keeps the first owner unless --force, and `fleet usage` sums the runs the
records hold (runs claimed, reported and finished through state.records)."""

import json
import time

import pytest

from core import constants as C
from state.jobrecord import JobState
from state.records import Records

pytestmark = pytest.mark.integration
H = 3600.0

MANIFEST = """
[[jobs]]
name = "{name}"
command = ["true", "{name}"]
[jobs.sweep]
seed = [{seeds}]
"""


def publish(fleet_cli, capsys, tmp_path, name: str, seeds: int, *flags: str) -> dict[str, str]:
    path = tmp_path / f"{name}.toml"
    path.write_text(MANIFEST.format(name=name, seeds=", ".join(map(str, range(seeds)))))
    assert fleet_cli(["publish", str(path), "--json", *flags]) == 0
    return {r["name"]: r["job_id"] for r in json.loads(capsys.readouterr().out)}


def run(
    records: Records,
    job_id: str,
    state: JobState,
    hours: float,
    gpu: str | None,
    cores: int,
    token: str = "tok-",
) -> None:
    """A run of ``hours`` that held ``gpu`` and ``cores``, as a worker records it."""
    token += job_id
    assert records.claim(job_id, "gpu-host", token, {}, "cuda").run
    # it began that long ago
    records.r.hset(C.JOB_KEY + job_id, "started_at", time.time() - hours * H)
    fields = {"cores": cores, **({"gpu": gpu} if gpu else {})}
    assert records.heartbeat(job_id, token, **fields) == "ok"
    if state is not JobState.RUNNING:
        assert records.finish(job_id, token, state)


def status_ids(fleet_cli, capsys, *flags: str) -> set[str]:
    assert fleet_cli(["status", "--json", *flags]) == 0
    return {j["job_id"] for j in json.loads(capsys.readouterr().out)["jobs"]}


def test_two_owners_are_filtered_apart_and_their_usage_is_summed(
    fleet_cli, capsys, tmp_path, redis_client, monkeypatch
):
    alice = publish(fleet_cli, capsys, tmp_path, "a", 3, "--owner", "alice")
    monkeypatch.setenv("FLEET_OWNER", "bob")
    bob = publish(fleet_cli, capsys, tmp_path, "b", 2)
    again = publish(fleet_cli, capsys, tmp_path, "a", 3)  # bob re-publishes alice's sweep
    assert again == alice
    assert status_ids(fleet_cli, capsys, "--owner", "alice") == set(alice.values())
    assert status_ids(fleet_cli, capsys, "--owner", "bob") == set(bob.values())
    assert status_ids(fleet_cli, capsys, "--owner", "carol") == set()

    records = Records(redis_client)
    a0, a1, a2 = (alice[f"a[seed={i}]"] for i in range(3))
    b0, b1 = (bob[f"b[seed={i}]"] for i in range(2))
    run(records, a0, JobState.SUCCEEDED, 2.0, "0:H100,1:H100", 8)  # 4 GPU-h, 16 core-h
    run(records, a1, JobState.FAILED, 1.0, "2:H100", 4)  # 1 GPU-h, 4 core-h
    run(records, b0, JobState.RUNNING, 0.5, "3:H100", 2)  # 0.5 GPU-h, 1 core-h, so far
    run(records, b1, JobState.SUCCEEDED, 3.0, None, 16)  # CPU only: 48 core-h
    assert records.get(a0).owner == "alice" and records.get(a0).cores == 8
    assert fleet_cli(["show", a1, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["owner"] == "alice"

    assert fleet_cli(["usage", "--since", "7d", "--json"]) == 0
    got = {u["owner"]: u for u in json.loads(capsys.readouterr().out)["owners"]}
    # a2 is queued: a job, no hours
    assert (got["alice"]["jobs"], got["alice"]["failures"]) == (3, 1)
    assert got["alice"]["gpu_hours"] == pytest.approx(5.0, abs=0.01)
    assert got["alice"]["core_hours"] == pytest.approx(20.0, abs=0.01)
    assert (got["bob"]["jobs"], got["bob"]["failures"]) == (2, 0)
    assert got["bob"]["gpu_hours"] == pytest.approx(0.5, abs=0.01)
    assert got["bob"]["core_hours"] == pytest.approx(49.0, abs=0.01)
    assert records.get(a2).state is JobState.QUEUED

    assert fleet_cli(["usage"]) == 0
    assert "alice" in capsys.readouterr().out


def test_usage_counts_every_run_of_a_job_handed_back_before_it_ran_to_its_end(
    fleet_cli, capsys, tmp_path, redis_client
):
    (jid,) = publish(fleet_cli, capsys, tmp_path, "p", 1, "--owner", "erin").values()
    records = Records(redis_client)
    run(records, jid, JobState.QUEUED, 1.0, "0:H100", 4)  # preempted after 1 h: back to its queue
    assert fleet_cli(["usage", "--json"]) == 0
    got = {u["owner"]: u for u in json.loads(capsys.readouterr().out)["owners"]}["erin"]
    assert (got["gpu_hours"], got["core_hours"]) == (
        pytest.approx(1.0, abs=0.01),
        pytest.approx(4.0, abs=0.01),
    )
    # then 2 h on 2 GPUs
    run(records, jid, JobState.SUCCEEDED, 2.0, "0:H100,1:H100", 8, token="tok2-")
    assert fleet_cli(["usage", "--json"]) == 0
    got = {u["owner"]: u for u in json.loads(capsys.readouterr().out)["owners"]}["erin"]
    assert got["jobs"] == 1
    assert got["gpu_hours"] == pytest.approx(1.0 + 4.0, abs=0.01)
    assert got["core_hours"] == pytest.approx(4.0 + 16.0, abs=0.01)


def test_a_forced_re_publish_takes_the_job_over(
    fleet_cli, capsys, tmp_path, redis_client, monkeypatch
):
    first = publish(fleet_cli, capsys, tmp_path, "a", 1, "--owner", "alice")
    records = Records(redis_client)
    jid = first["a[seed=0]"]
    run(records, jid, JobState.SUCCEEDED, 1.0, "0:A", 2)
    publish(fleet_cli, capsys, tmp_path, "a", 1, "--owner", "bob")
    assert records.get(jid).owner == "alice"
    publish(fleet_cli, capsys, tmp_path, "a", 1, "--owner", "bob", "--force", "a[seed=0]")
    rec = records.get(jid)
    assert (rec.owner, rec.cores, rec.gpu, rec.state) == ("bob", None, "", JobState.QUEUED)


def test_a_bad_owner_is_refused_before_anything_is_sent(fleet_cli, capsys, tmp_path, redis_client):
    path = tmp_path / "a.toml"
    path.write_text(MANIFEST.format(name="a", seeds="0"))
    assert fleet_cli(["publish", str(path), "--owner", "alice smith"]) == 1
    assert "--owner 'alice smith'" in capsys.readouterr().err
    assert redis_client.zcard(C.JOBS_INDEX) == 0


def test_a_jobs_own_owner_key_outranks_the_publishers_owner(
    fleet_cli, capsys, tmp_path, redis_client
):
    path = tmp_path / "m.toml"
    path.write_text(
        '[[jobs]]\nname = "mine"\ncommand = ["true", "1"]\nowner = "dana"\n'
        '[[jobs]]\nname = "theirs"\ncommand = ["true", "2"]\n'
    )
    assert fleet_cli(["publish", str(path), "--json", "--owner", "erin"]) == 0
    ids = {r["name"]: r["job_id"] for r in json.loads(capsys.readouterr().out)}
    assert status_ids(fleet_cli, capsys, "--owner", "dana") == {ids["mine"]}
    assert status_ids(fleet_cli, capsys, "--owner", "erin") == {ids["theirs"]}
