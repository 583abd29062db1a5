"""flowerconfig.py's decisions: Flower never starts without auth unless told to, on loopback."""
import pytest

from core.errors import ConfigError
from fleet.flower_extras import basic_auth_users, settings


@pytest.mark.parametrize("env, argv, expected", [
    ({"FLOWER_BASIC_AUTH": "ops:pw"}, [], {"address": "127.0.0.1", "basic_auth": ["ops:pw"]}),
    ({"FLOWER_BASIC_AUTH": "a:1, b:2", "FLOWER_ADDRESS": "0.0.0.0"}, [],
     {"address": "0.0.0.0", "basic_auth": ["a:1", "b:2"]}),
    ({}, ["celery", "flower", "--basic-auth=ops:pw"], {"address": "127.0.0.1"}),
    ({}, ["celery", "flower", "--auth=.*@example.com"], {"address": "127.0.0.1"}),
    ({"FLOWER_UNAUTHENTICATED": "1"}, [], {"address": "127.0.0.1"}),
])
def test_flower_gets_a_loopback_address_and_the_auth_it_was_given(env, argv, expected):
    assert settings(env, argv) == expected


@pytest.mark.parametrize("env", [{}, {"FLOWER_UNAUTHENTICATED": "0"}, {"FLOWER_BASIC_AUTH": ""}])
def test_flower_refuses_to_start_with_no_auth_and_says_which_variable_to_set(env):
    with pytest.raises(ConfigError, match="FLOWER_BASIC_AUTH=user:password"):
        settings(env, ["celery", "flower", "--port=5555"])


@pytest.mark.parametrize("raw, bad", [("hunter2x", 1), ("hunter2x:", 1), (":hunter2x", 1), ("a:1,hunter2x", 2)])
def test_a_malformed_basic_auth_entry_is_named_by_position_without_echoing_it(raw, bad):
    with pytest.raises(ConfigError, match=f"entry {bad}:") as e:
        basic_auth_users(raw)
    assert "hunter2x" not in str(e.value)
