"""End to end: real workers with simulated capabilities consume exactly their queues,
run each job on a host that qualifies, and store artifacts that verify and load."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from artifacts.stores import open_store_at
from core.constants import TASK_NAME
from fleet.local import start_worker
from state.jobrecord import JobState
from state.records import Records
from tests.harness.cli import CLI_HANG_S
from tests.harness.fleet import HOSTS, fleet_store, open_bundle, staged_keys, wait_terminal
from tests.harness.workers import CPU, client_app
from tests.waiting import wait_until

pytestmark = pytest.mark.e2e
EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "data"

MANIFEST = f"""
[[jobs]]
name = "large-gbt"
model = "gbt"
data = "{EXAMPLES / "moons.csv"}"
hyper = {{ n_estimators = 20 }}
require_cuda = true
min_vram_gib = 24

[[jobs]]
name = "cuda-mlp"
model = "mlp"
data = "{EXAMPLES / "moons.parquet"}"
hyper = {{ epochs = 2, hidden_sizes = "8" }}
require_cuda = true
min_vram_gib = 8

[[jobs]]
name = "cpu-gbt"
model = "gbt"
data = "{EXAMPLES / "housing_small.csv"}"
hyper = {{ n_estimators = 10 }}

[[jobs]]
name = "only-on-cpu-host"
command = ["python", "-c", "import pathlib; pathlib.Path('out').mkdir(exist_ok=True); pathlib.Path('out/x.txt').write_text('hi')"]
allowed_hosts = ["e2e-cpu"]
"""  # noqa: E501

EXPECTED_QUEUES = {
    "e2e-large": ["cuda-large", "cuda", "cpu"],
    "e2e-cuda": ["cuda", "cpu"],
    "e2e-cpu": ["cpu"],
}
QUALIFIED = {
    "large-gbt": {"e2e-large"},
    "cuda-mlp": {"e2e-large", "e2e-cuda"},
    "cpu-gbt": set(HOSTS),
    "only-on-cpu-host": {"e2e-cpu"},
}


def test_workers_consume_exactly_the_queues_their_capability_qualifies_for(fleet):
    out = subprocess.run(
        [sys.executable, "-m", "celery", "-A", "tasks", "inspect", "active_queues", "--json"],
        env=fleet.env,
        capture_output=True,
        text=True,
        timeout=CLI_HANG_S,
    )
    replies = json.loads(out.stdout)
    got = {node.split("@")[0]: [q["name"] for q in queues] for node, queues in replies.items()}
    assert got == EXPECTED_QUEUES


def test_each_job_runs_on_a_qualifying_host_and_its_artifact_verifies_and_loads(fleet, tmp_path):
    manifest = tmp_path / "m.toml"
    manifest.write_text(MANIFEST)
    plan = json.loads(
        fleet.fleet("publish", str(manifest), "--dry-run", "--json", check=True).stdout
    )
    assert {r["name"]: r["queue"] for r in plan}["large-gbt"] == "cuda-large"
    published = json.loads(fleet.fleet("publish", str(manifest), "--json", check=True).stdout)
    assert all(r["action"] == "publish" for r in published)
    ids = {r["job_id"]: r["name"] for r in published}

    recs = wait_terminal(Records(fleet.client()), set(ids))
    states = {ids[j]: r.state for j, r in recs.items()}
    assert states == {n: JobState.SUCCEEDED for n in ids.values()}, fleet.logs()
    for rec in recs.values():
        assert rec.worker in QUALIFIED[rec.name], (rec.name, rec.worker)

    again = json.loads(fleet.fleet("publish", str(manifest), "--json", check=True).stdout)
    assert [r["action"] for r in again] == ["skip"] * len(ids)

    import os

    os.environ.update({k: v for k, v in fleet.env.items() if k.startswith(("AWS_", "FLEET_S3"))})
    store = open_store_at(fleet.store_url)
    for jid, rec in recs.items():
        art = rec.artifact
        kind = rec.spec.get("model") or "command"
        path = store.get_bundle(kind, art["sha256"], tmp_path / rec.name / "bundle.tar.zst")
        assert hashlib.sha256(path.read_bytes()).hexdigest() == art["sha256"]
        assert art["uri"].startswith(fleet.store_url)
        out = tmp_path / rec.name / "x"
        with open_bundle(path) as tar:
            tar.extractall(out)
        meta = json.loads((out / "meta.json").read_text())
        assert meta["job_id"] == jid and meta["worker"] == rec.worker
        if rec.spec.get("model"):
            import pandas as pd

            from trainers.models import load_model

            model = load_model(out)
            data = (
                pd.read_csv(EXAMPLES / "moons.csv")
                if rec.name != "cpu-gbt"
                else pd.read_csv(EXAMPLES / "housing_small.csv")
            )
            assert len(model.predict(data.drop(columns=["target"]).head(5))) == 5
        else:
            assert (out / "out" / "x.txt").read_text() == "hi"


def test_a_worker_asked_for_a_queue_its_host_does_not_qualify_for_refuses_to_start(fleet):
    proc = start_worker("e2e-refuse", CPU, fleet.env, fleet.log_dir, extra=["-Q", "cuda"])
    assert proc.wait(60) != 0
    log = (fleet.log_dir / "e2e-refuse.log").read_text()
    assert "does not qualify for cuda" in log and "needs a CUDA device" in log


def test_a_pickle_message_on_a_fleet_queue_is_never_executed(fleet, tmp_path):
    marker = tmp_path / "pickled-ran"
    job_id = uuid.uuid4().hex
    job = {"name": "evil", "job_id": job_id, "command": ["touch", str(marker)]}
    client_app(fleet.env["FLEET_BROKER_URL"]).send_task(
        TASK_NAME, args=[job], task_id=job_id, queue="cpu", serializer="pickle"
    )
    from state.deadletter import entries

    wait_until(
        "the worker sets the pickle message aside",
        lambda: any(
            "fleet accepts JSON only" in e["reason"] and e["queue"] == "cpu"
            for e in entries(fleet.client())
        ),
        60,
        fleet.logs,
    )
    assert not marker.exists()
    assert not fleet.client().exists(f"fleet:job:{job_id}")


def test_a_manifest_naming_missing_data_publishes_nothing_and_exits_2_with_the_line(
    fleet, tmp_path
):
    manifest = tmp_path / "missing.toml"
    manifest.write_text(
        '[[jobs]]\nname = "no-data"\nmodel = "gbt"\ndata = "/nonexistent/fleet-e2e.csv"\n'
    )
    out = fleet.fleet("publish", str(manifest), "--json")
    assert out.returncode == 2
    [problem] = json.loads(out.stdout)["problems"]
    assert (problem["line"], problem["field"]) == (4, "jobs[0].data")
    assert "/nonexistent/fleet-e2e.csv" in problem["message"]
    assert not [r for r in Records(fleet.client()).all() if r.name == "no-data"]


DATA_MANIFEST = """
[[jobs]]
name = "from-store-gbt"
model = "gbt"
data = "data/moons.csv"
hyper = { n_estimators = 5 }

[[jobs]]
name = "from-store-tree"
command = ["python", "-c", "import os, pathlib; d = pathlib.Path(os.environ['FLEET_DATA_PATH']); pathlib.Path('out').mkdir(exist_ok=True); pathlib.Path('out/seen.txt').write_text(repr(sorted((p.relative_to(d).as_posix(), p.read_text()) for p in d.rglob('*') if p.is_file())))"]
data = "data/tree"
"""  # noqa: E501


def data_project(root: Path) -> Path:
    (root / "data" / "tree" / "sub").mkdir(parents=True)
    shutil.copy(EXAMPLES / "moons.csv", root / "data" / "moons.csv")
    (root / "data" / "tree" / "a.txt").write_text("alpha")
    (root / "data" / "tree" / "sub" / "b.txt").write_text("beta")
    (root / "m.toml").write_text(DATA_MANIFEST)
    return root / "m.toml"


def test_workers_train_from_the_store_after_the_publishers_directory_is_deleted(fleet, tmp_path):
    manifest = data_project(tmp_path / "publisher")
    before = staged_keys(fleet)
    published = json.loads(fleet.fleet("publish", str(manifest), "--json", check=True).stdout)
    shutil.rmtree(tmp_path / "publisher")  # nothing of the publisher's disk is left to read
    ids = {r["job_id"]: r["name"] for r in published}
    recs = wait_terminal(Records(fleet.client()), set(ids))
    assert {r.name: r.state for r in recs.values()} == {
        n: JobState.SUCCEEDED for n in ids.values()
    }, fleet.logs()
    for rec in recs.values():
        assert rec.spec["data"].startswith("store+sha256://") and "publisher" not in json.dumps(
            rec.spec
        )
    tree = next(r for r in recs.values() if r.name == "from-store-tree")
    store = fleet_store(fleet)
    bundle_path = store.get_bundle("command", tree.artifact["sha256"], tmp_path / "tree.tar.zst")
    with open_bundle(bundle_path) as tar:
        seen = tar.extractfile("out/seen.txt").read().decode()
    assert seen == repr([("a.txt", "alpha"), ("sub/b.txt", "beta")])

    # the same manifest from a copy: same IDs, nothing published, nothing sent to the store
    keys = staged_keys(fleet)
    # moons.csv may be there already
    assert len(keys - before) >= 1 and len(keys) - len(before) <= 2
    again = json.loads(
        fleet.fleet("publish", str(data_project(tmp_path / "copy")), "--json", check=True).stdout
    )
    assert {r["job_id"]: r["action"] for r in again} == {j: "skip" for j in ids}
    assert staged_keys(fleet) == keys

    # an edited CSV: one new job, one new object
    with open(tmp_path / "copy" / "data" / "moons.csv", "a") as f:
        f.write("0.5,0.5,0.1,0.1,1\n")
    edited = json.loads(
        fleet.fleet("publish", str(tmp_path / "copy" / "m.toml"), "--json", check=True).stdout
    )
    assert sorted((r["name"], r["action"]) for r in edited) == [
        ("from-store-gbt", "publish"),
        ("from-store-tree", "skip"),
    ]
    assert len(staged_keys(fleet) - keys) == 1
    new = next(r["job_id"] for r in edited if r["action"] == "publish")
    assert wait_terminal(Records(fleet.client()), {new})[new].state is JobState.SUCCEEDED, (
        fleet.logs()
    )


def test_a_worker_given_q_serves_only_that_tier_and_the_constraint_queues_of_it_that_admit_it(
    fleet, tmp_path
):
    from fleet.local import stop_worker
    from tests.harness.workers import CUDA_LARGE, wait_for_workers

    manifest = tmp_path / "q.toml"
    manifest.write_text(
        '[[jobs]]\nname = "for-q-host"\ncommand = ["true"]\nallowed_hosts = ["e2e-q"]\n'
    )
    [row] = json.loads(fleet.fleet("publish", str(manifest), "--json", check=True).stdout)
    assert row["queue"].startswith("cpu.")
    proc = start_worker("e2e-q", CUDA_LARGE, fleet.env, fleet.log_dir, extra=["-Q", "cpu"])
    try:
        wait_for_workers(fleet.env, ["e2e-q"])
        rec = wait_terminal(Records(fleet.client()), {row["job_id"]}, timeout_s=60)[row["job_id"]]
        assert rec.state is JobState.SUCCEEDED and rec.worker == "e2e-q"
        app = client_app(fleet.env["FLEET_BROKER_URL"])
        deadline = time.monotonic() + 30  # the refresh runs every 10 s and converges
        while time.monotonic() < deadline:
            replies = app.control.inspect(timeout=2.0).active_queues() or {}
            got = [
                q["name"] for node, qs in replies.items() if node.startswith("e2e-q@") for q in qs
            ]
            if got == [row["queue"], "cpu"]:
                break
            time.sleep(1)
        assert got == [row["queue"], "cpu"], fleet.logs()
    finally:
        stop_worker(proc)
