"""End to end: a small grid sweep of command jobs that print a loss each epoch runs through a
real worker; then `fleet results` ranks it, `fleet plot` draws it, `fleet export mlflow`
writes it (twice, without duplicates), and each bundle carries its metrics.jsonl."""

from __future__ import annotations

import io
import json
import os
import tarfile
import uuid

import pytest
import zstandard

from artifacts.stores import open_store_at
from fleet.local import start_worker, stop_worker
from fleet.redis_server import RedisServer
from state.records import Records
from tests.harness.fleet import Fleet, wait_terminal
from tests.harness.workers import CPU, wait_for_workers

pytestmark = pytest.mark.e2e
LRS = (0.1, 0.3, 0.5)
# the loss is lowest at lr = 0.3 and falls each epoch
SCRIPT = (
    "import json, os; lr = json.loads(os.environ['FLEET_HYPER'])['lr']; "
    "[print('FLEET_METRIC ' + json.dumps({'epoch': e, 'loss': (lr - 0.3) ** 2 + 1 / e}), "
    "flush=True) "
    "for e in (1, 2, 3)]"
)
MANIFEST = f"""
[[jobs]]
name = "grid"
command = ["python", "-c", {json.dumps(SCRIPT)}]
[jobs.sweep]
lr = [{", ".join(map(str, LRS))}]
"""


@pytest.fixture(scope="module")
def one_worker(tmp_path_factory, s3_server):
    root = tmp_path_factory.mktemp("results-fleet")
    server = RedisServer(root / "redis").start()
    env = dict(
        os.environ,
        FLEET_BROKER_URL=server.url,
        FLEET_STORE_URL=f"s3://e2e-{uuid.uuid4().hex[:8]}/runs",
        FLEET_LEASE_TTL_S="5",
        **s3_server.env,
    )
    env.pop("FLEET_CAPABILITY", None)
    worker = start_worker("e2e-results", CPU, env, root / "logs")
    f = Fleet(server, env, env["FLEET_STORE_URL"], root / "logs", {"e2e-results": worker})
    try:
        wait_for_workers(env, ["e2e-results"])
        yield f
    finally:
        stop_worker(worker)
        server.stop()


def wait_succeeded(fleet: Fleet, ids: set[str], timeout_s: float = 120) -> dict:
    recs = wait_terminal(Records(fleet.client()), ids, timeout_s)
    assert {r.state.value for r in recs.values()} == {"succeeded"}, fleet.logs()
    return recs


def test_a_sweep_through_a_real_worker_is_ranked_drawn_exported_and_bundled_with_its_history(
    one_worker, tmp_path
):
    fleet = one_worker
    (tmp_path / "m.toml").write_text(MANIFEST)
    published = json.loads(
        fleet.fleet("publish", str(tmp_path / "m.toml"), "--json", check=True).stdout
    )
    recs = wait_succeeded(fleet, {r["job_id"] for r in published})

    out = fleet.fleet("results", "grid", "--json")
    assert out.returncode == 0, out.stderr
    items = json.loads(out.stdout)
    assert [i["params"] for i in items][0] == {"lr": 0.3} and items[0]["best"]
    assert all(
        i["steps"] == 3 and i["host"] == "e2e-results" and i["state"] == "succeeded" for i in items
    )
    assert items[0]["value"] == pytest.approx(1 / 3) and items[0]["metric"] == "loss"
    table = fleet.fleet("results", "grid")
    assert table.returncode == 0 and "grid: 3 sweep points (3 succeeded)" in table.stdout

    png = tmp_path / "grid.png"
    drawn = fleet.fleet("plot", "grid", "-o", str(png))
    assert drawn.returncode == 0, drawn.stderr
    assert png.read_bytes()[:4] == b"\x89PNG"

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    for counts in ((3, 0, 0), (0, 0, 3)):  # again, nothing changed: nothing updated
        done = fleet.fleet("export", "mlflow", "grid", "--tracking-uri", uri, "--json")
        assert done.returncode == 0, done.stderr
        said = json.loads(done.stdout)
        assert (said["created"], said["updated"], said["unchanged"]) == counts
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    runs = client.search_runs([client.get_experiment_by_name("grid").experiment_id])
    assert sorted(r.data.tags["fleet.job_id"] for r in runs) == sorted(recs)
    for r in runs:
        assert [m.step for m in client.get_metric_history(r.info.run_id, "loss")] == [1, 2, 3]
        assert (
            r.data.tags["fleet.bundle_sha256"]
            == recs[r.data.tags["fleet.job_id"]].artifact["sha256"]
        )
        # the run's own times, and its points' times within them
        rec = recs[r.data.tags["fleet.job_id"]]
        assert (r.info.start_time, r.info.end_time) == (
            round(rec.started_at * 1000),
            round(rec.finished_at * 1000),
        )
        stamps = [m.timestamp for m in client.get_metric_history(r.info.run_id, "loss")]
        assert all(r.info.start_time <= t <= r.info.end_time for t in stamps), stamps

    os.environ.update({k: v for k, v in fleet.env.items() if k.startswith(("AWS_", "FLEET_S3"))})
    rec = next(iter(recs.values()))
    bundle = open_store_at(fleet.store_url).get_bundle(
        "command", rec.artifact["sha256"], tmp_path / "b.tar.zst"
    )
    raw = zstandard.ZstdDecompressor().decompressobj().decompress(bundle.read_bytes())
    with tarfile.open(fileobj=io.BytesIO(raw)) as tar:
        points = [
            json.loads(line)
            for line in tar.extractfile("metrics.jsonl").read().decode().splitlines()
        ]
    assert [p["step"] for p in points] == [1, 2, 3] and all("loss" in p for p in points)
