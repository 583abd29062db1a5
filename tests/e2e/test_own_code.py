"""End to end: a project of one's own (code, a helper module, a requirement the worker
lacks) published from a clone that is then deleted, trained by a real worker elsewhere."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from fleet.local import stop_worker
from fleet.redis_server import RedisServer
from state.jobrecord import JobState
from state.records import Records
from tests.fixtures.wheels import make_wheel, offline_index
from tests.harness.fleet import Fleet, fleet_store, open_bundle, staged_keys, wait_terminal
from tests.harness.workers import CPU, wait_for_workers

pytestmark = pytest.mark.e2e
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "own-code"
HOST = "own-cpu"
# the example's one requirement, served offline: the worker does not have it
TABULATE = (
    "def tabulate(rows, headers=()):\n"
    "    return '\\n'.join(' '.join(str(c) for c in r) for r in [list(headers), *rows])\n"
)


@pytest.fixture(scope="module")
def fleet(tmp_path_factory, s3_server):
    root = tmp_path_factory.mktemp("owncode")
    server = RedisServer(root / "redis").start()
    store_url = f"s3://own-{uuid.uuid4().hex[:8]}/runs"
    env = dict(
        os.environ,
        FLEET_BROKER_URL=server.url,
        FLEET_STORE_URL=store_url,
        FLEET_LEASE_TTL_S="5",
        **s3_server.env,
    )
    env.pop("FLEET_CAPABILITY", None)
    make_wheel(root / "wheels", "tabulate", "0.9.0", TABULATE)
    elsewhere = root / "elsewhere"  # the worker's cwd: nothing of the publisher's there
    elsewhere.mkdir()
    wenv = dict(
        env,
        **offline_index(root / "wheels"),
        FLEET_HOSTNAME=HOST,
        FLEET_WORK_DIR=str(root / "work"),
        FLEET_CAPABILITY=json.dumps({"hostname": HOST, **CPU}),
    )
    (root / "logs").mkdir()
    with open(root / "logs" / f"{HOST}.log", "ab") as log:
        worker = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "celery",
                "-A",
                "tasks",
                "worker",
                "-n",
                f"{HOST}@%h",
                "--loglevel=INFO",
                "--without-mingle",
                "--without-gossip",
                "-c",
                "2",
            ],
            env=wenv,
            cwd=elsewhere,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    f = Fleet(server, env, store_url, root / "logs", {HOST: worker})
    try:
        wait_for_workers(env, [HOST])
        yield f
    finally:
        stop_worker(worker)
        server.stop()


def clone(tmp_path: Path, name: str) -> Path:
    return Path(shutil.copytree(EXAMPLE, tmp_path / name))


def publish(fleet, manifest: Path) -> list[dict]:
    out = fleet.fleet("publish", str(manifest), "--json")
    assert out.returncode == 0, out.stderr + out.stdout
    return json.loads(out.stdout)


def logs(fleet, job_id: str) -> str:
    return fleet.fleet("logs", job_id, check=True).stdout


def artifact_json(fleet, rec, tmp_path: Path, member: str) -> dict:
    bundle = fleet_store(fleet).get_bundle(
        "command", rec.artifact["sha256"], tmp_path / f"{rec.job_id[:8]}.tar.zst"
    )
    with open_bundle(bundle) as tar:
        return json.loads(tar.extractfile(member).read())


def test_own_code_travels_is_trained_elsewhere_and_its_environment_is_built_once(fleet, tmp_path):
    records = Records(fleet.client())
    first = clone(tmp_path, "clone-a")
    [row] = publish(fleet, first / "fleet.toml")
    shutil.rmtree(first)  # the code now lives in the store only
    rec = wait_terminal(records, {row["job_id"]})[row["job_id"]]
    assert rec.state is JobState.SUCCEEDED, (rec.last_error, fleet.logs())
    assert rec.spec["workdir"].startswith("store+sha256://") and "clone-a" not in json.dumps(
        rec.spec
    )
    result = artifact_json(fleet, rec, tmp_path, "out/result.json")
    assert abs(result["slope"] - 3.0) < 0.1
    built = logs(fleet, row["job_id"])
    assert "building environment" in built and "tabulate" in built and "param value" in built

    # the same code from a second clone: the same job, nothing sent
    keys = staged_keys(fleet)
    second = clone(tmp_path, "clone-b")
    assert [(r["job_id"], r["action"]) for r in publish(fleet, second / "fleet.toml")] == [
        (row["job_id"], "skip")
    ]
    assert staged_keys(fleet) == keys

    # one edited byte of train.py: one new job, and the environment is reused
    with open(second / "train.py", "a") as f:
        f.write("# edited\n")
    [edited] = publish(fleet, second / "fleet.toml")
    assert edited["action"] == "publish" and edited["job_id"] != row["job_id"]
    assert len(staged_keys(fleet) - keys) == 1
    rec = wait_terminal(records, {edited["job_id"]})[edited["job_id"]]
    assert rec.state is JobState.SUCCEEDED, (rec.last_error, fleet.logs())
    reused = logs(fleet, edited["job_id"])
    assert "cached" in reused and "building environment" not in reused

    hosts = json.loads(fleet.fleet("hosts", "--json", check=True).stdout)
    [me] = [h for h in hosts if h["hostname"] == HOST]
    assert len(me["envs"]) == 1 and me["envs"][0]["bytes"] > 0


def test_a_misspelled_requirement_fails_the_job_once_with_uvs_message(fleet, tmp_path):
    project = clone(tmp_path, "typo")
    (project / "requirements.txt").write_text("tabulatee==0.9.0\n")
    (project / "fleet.toml").write_text((project / "fleet.toml").read_text() + "max_attempts = 3\n")
    [row] = publish(fleet, project / "fleet.toml")
    rec = wait_terminal(Records(fleet.client()), {row["job_id"]})[row["job_id"]]
    assert rec.state is JobState.FAILED and rec.attempts == 1, (
        rec.state,
        rec.attempts,
        fleet.logs(),
    )
    assert "environment build failed" in rec.last_error and "tabulatee" in rec.last_error


def test_a_workdir_holding_a_1_gib_file_is_refused_at_publish_naming_it(fleet, tmp_path):
    project = clone(tmp_path, "big")
    subprocess.run(["truncate", "-s", "1G", str(project / "weights.bin")], check=True)
    out = fleet.fleet("publish", str(project / "fleet.toml"))
    assert out.returncode == 2
    assert "weights.bin" in out.stderr + out.stdout and "200" in out.stderr + out.stdout


def test_dry_run_shows_the_workdir_and_sends_nothing(fleet, tmp_path):
    project = clone(tmp_path, "dry")
    (project / "linefit.py").write_text((project / "linefit.py").read_text() + "# dry\n")
    keys = staged_keys(fleet)
    out = fleet.fleet("publish", str(project / "fleet.toml"), "--dry-run")
    assert out.returncode == 0, out.stderr
    assert "workdir" in out.stdout and "files" in out.stdout and "sha256" in out.stdout
    assert staged_keys(fleet) == keys
