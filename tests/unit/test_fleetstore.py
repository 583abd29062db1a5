"""The fleet's store (state.fleetstore): which store a publisher or worker uses, and the
refusal that names both stores with their secrets masked. Pure; Redis is in integration."""

import pytest

from core.errors import ConfigError
from state.fleetstore import Choice, choose, same

BROKER = "redis://:broker-pw-123@10.0.0.5:6379/0"


def test_one_that_names_no_store_uses_the_fleets():
    assert choose(
        "s3://fleet/runs", None, "file:///here/.fleet-local/store", "publisher", BROKER
    ) == Choice("s3://fleet/runs")


def test_one_that_names_the_fleets_store_uses_it_spelled_either_way():
    assert choose("s3://fleet/runs", "s3://fleet/runs/", "x", "worker", BROKER) == Choice(
        "s3://fleet/runs"
    )
    assert same("file:///srv/store", "file:///srv/../srv/store")


def test_with_none_recorded_a_named_store_is_to_be_recorded_and_a_default_is_not():
    assert choose(None, "file:///srv/store", "file:///d", "worker", BROKER) == Choice(
        "file:///srv/store", True
    )
    assert choose(None, None, "file:///d", "worker", BROKER) == Choice("file:///d", False)


def test_another_store_is_refused_naming_both_with_secrets_masked():
    with pytest.raises(ConfigError) as e:
        choose(
            "s3://fleet/runs?token=tok-secret-1",
            "https://user:pw-secret-2@other.example/x",
            "d",
            "publisher",
            BROKER,
        )
    text = str(e.value)
    assert "s3://fleet/runs?token=***" in text and "https://***@other.example/x" in text
    assert "publisher" in text and "FLEET_STORE_URL" in text and "fleet store set URL" in text
    assert not any(s in text for s in ("tok-secret-1", "pw-secret-2", "broker-pw-123"))
