"""`fleet settings`: the effective settings, where each came from, secrets masked, 80 columns."""

import json

import pytest

from fleet import cli
from fleet.cli.settings import WIDTH

PASSWORD = "hunter2-very-secret"
BROKER = f"redis://fleet-worker:{PASSWORD}@redis.example:6379/2"


@pytest.fixture
def env(monkeypatch):
    monkeypatch.setenv("FLEET_BROKER_URL", BROKER)
    monkeypatch.setenv("FLEET_YIELD", "on")
    monkeypatch.setenv(
        "FLEET_STORE_URL", "s3://a-bucket-with-a-rather-long-name/and/a/long/prefix/runs"
    )
    monkeypatch.delenv("FLEET_LEASE_TTL_S", raising=False)


def test_fleet_settings_masks_the_password_in_the_broker_url_and_says_where_values_came_from(
    env, capsys
):
    assert cli.main(["settings"]) == 0
    out = capsys.readouterr().out
    assert PASSWORD not in out
    lines = {ln.split()[0]: ln.split()[1:] for ln in out.splitlines()[1:]}
    assert lines["FLEET_BROKER_URL"] == ["env", "redis://***@redis.example:6379/2"]
    assert lines["FLEET_YIELD"] == ["env", "1"]
    assert lines["FLEET_LEASE_TTL_S"] == ["default", "60"]


def test_fleet_settings_fits_80_columns(env, capsys):
    assert cli.main(["settings"]) == 0
    out = capsys.readouterr().out
    assert max(len(ln) for ln in out.splitlines()) <= WIDTH
    store = next(ln for ln in out.splitlines() if ln.startswith("FLEET_STORE_URL "))
    assert store.split()[2].startswith("s3://a-bucket-with") and store.endswith("...")


def test_fleet_settings_json_masks_the_password_and_keeps_long_values_whole(env, capsys):
    assert cli.main(["settings", "--json"]) == 0
    out = capsys.readouterr().out
    rows = {r["name"]: r for r in json.loads(out)}
    assert PASSWORD not in out
    assert rows["FLEET_BROKER_URL"] == {
        **rows["FLEET_BROKER_URL"],
        "source": "env",
        "secret": True,
        "value": "redis://***@redis.example:6379/2",
    }
    assert rows["FLEET_STORE_URL"]["value"].endswith("/long/prefix/runs")
    assert "FLEET_JOB_ID" not in rows  # given to jobs: not a setting of this host


def test_fleet_settings_names_every_bad_value_and_fails(monkeypatch, capsys):
    monkeypatch.setenv("FLEET_ADOPT_UNPUBLISHED", "maybe")
    monkeypatch.setenv("FLEET_LEASE_TTL_S", "soon")
    assert cli.main(["settings"]) == 1
    err = capsys.readouterr().err
    assert "FLEET_ADOPT_UNPUBLISHED='maybe'" in err and "FLEET_LEASE_TTL_S='soon'" in err
