"""`fleet logs --rank N` names a member the job has, or says which ranks it has."""

import json

import pytest

from tests.harness.manifests import command_job

pytestmark = pytest.mark.integration

MANIFEST = command_job("solo", ["true"]) + command_job("pair", ["true"], nodes=2)


@pytest.fixture
def published(fleet_cli, tmp_path, capsys):
    path = tmp_path / "m.toml"
    path.write_text(MANIFEST)
    assert fleet_cli(["publish", str(path), "--json"]) == 0
    return {r["name"]: r["job_id"] for r in json.loads(capsys.readouterr().out)}


def test_a_rank_the_job_does_not_have_is_an_error_listing_the_ranks_it_has(
    fleet_cli, published, capsys
):
    assert fleet_cli(["logs", "solo", "--rank", "5"]) == 2
    assert "solo has no rank 5; it has rank 0 only (not a gang)" in capsys.readouterr().err
    assert fleet_cli(["logs", "pair", "--rank", "2"]) == 2
    assert "pair has no rank 2; it has ranks 0..1 (nodes = 2)" in capsys.readouterr().err
    assert fleet_cli(["logs", "pair", "--rank", "-1"]) == 2
    capsys.readouterr()
    assert fleet_cli(["logs", "pair", "--rank", "1"]) == 0  # queued: nothing kept yet
    assert "no output kept for pair" in capsys.readouterr().err
