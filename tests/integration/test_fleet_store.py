"""The fleet knows its store (state.fleetstore), on a real Redis and a real file:// store:
a publisher that names none stages into the fleet's; one or a worker that names another
is refused at once; the first worker records its store; `fleet store` shows and sets it."""

from __future__ import annotations

import os

import pytest

from core import constants as C
from fleet.local import start_worker, stop_worker
from state import fleetstore
from tests.waiting import wait_until

pytestmark = pytest.mark.integration

MANIFEST = """
[[jobs]]
name = "gbt"
model = "gbt"
data = "train.csv"
"""


@pytest.fixture
def project(tmp_path, monkeypatch):
    """A manifest with local data in a folder of its own, the working directory, with no
    FLEET_STORE_URL: only FLEET_BROKER_URL, as a publisher elsewhere has."""
    folder = tmp_path / "elsewhere"
    folder.mkdir()
    (folder / "train.csv").write_text("x,target\n1,0\n2,1\n")
    (folder / "m.toml").write_text(MANIFEST)
    monkeypatch.chdir(folder)
    monkeypatch.delenv("FLEET_STORE_URL", raising=False)
    return folder


def staged(store_dir) -> list:
    return sorted(p.name for p in (store_dir / C.DATA_DIR).glob("*"))


def test_a_publisher_that_names_no_store_stages_into_the_fleets(
    fleet_cli, redis_client, project, tmp_path
):
    fleetstore.record(redis_client, (tmp_path / "fleet-store").as_uri())
    assert fleet_cli(["publish", str(project / "m.toml")]) == 0
    assert len(staged(tmp_path / "fleet-store")) == 1
    assert not (project / ".fleet-local").exists()


def test_a_publisher_that_names_another_store_is_refused_naming_both(
    fleet_cli, redis_client, project, tmp_path, monkeypatch, capsys
):
    fleetstore.record(redis_client, (tmp_path / "fleet-store").as_uri())
    monkeypatch.setenv("FLEET_STORE_URL", (tmp_path / "mine").as_uri())
    assert fleet_cli(["publish", str(project / "m.toml")]) == 1
    err = capsys.readouterr().err
    assert f"this publisher's store {(tmp_path / 'mine').as_uri()}" in err
    assert f"the fleet's store {(tmp_path / 'fleet-store').as_uri()}" in err
    # nothing half-published: no data staged, no job queued
    assert not (tmp_path / "mine").exists() and not redis_client.exists(C.JOBS_INDEX)


def test_the_first_worker_records_its_store_and_a_worker_with_another_is_refused_at_start(
    redis_url, redis_client, tmp_path
):
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("FLEET_CAPABILITY", "FLEET_SENTINEL_MASTER")
    }
    env = dict(env, FLEET_BROKER_URL=redis_url, FLEET_STORE_URL=(tmp_path / "first").as_uri())
    cpu = {"cuda_devices": [], "ram_total_gib": 8}
    first = start_worker("store-first", cpu, env, tmp_path / "logs")
    try:
        assert (
            wait_until("the store recorded", lambda: fleetstore.recorded(redis_client))
            == (tmp_path / "first").as_uri()
        )
        other = (tmp_path / "other").as_uri()
        second = start_worker(
            "store-second", cpu, dict(env, FLEET_STORE_URL=other), tmp_path / "logs"
        )
        try:
            assert second.wait(90) != 0
        finally:
            stop_worker(second)
        log = (tmp_path / "logs" / "store-second.log").read_text()
        assert "refusing to start" in log and f"this worker's store {other}" in log
        assert fleetstore.recorded(redis_client) == (tmp_path / "first").as_uri()
    finally:
        stop_worker(first)


def test_fleet_store_set_records_an_absolute_store_and_fleet_store_shows_it(
    fleet_cli, redis_client, tmp_path, monkeypatch, capsys
):
    assert fleet_cli(["store"]) == 0
    assert "no store recorded yet" in capsys.readouterr().out
    monkeypatch.chdir(tmp_path)
    assert fleet_cli(["store", "set", "file://./shared-store"]) == 0
    assert fleetstore.recorded(redis_client) == (tmp_path / "shared-store").as_uri()
    assert fleet_cli(["store", "set", "s3://user:pw@bucket/runs"]) == 1  # credentials: AWS_*
    capsys.readouterr()
    assert fleet_cli(["store", "show"]) == 0
    assert f"the fleet's store: {(tmp_path / 'shared-store').as_uri()}" in capsys.readouterr().out
