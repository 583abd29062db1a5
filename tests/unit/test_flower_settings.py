"""flowerconfig.py's decisions: Flower never starts without auth unless told to, on loopback."""

import pytest

from core.errors import ConfigError
from fleet.flower_extras import basic_auth_users, settings


@pytest.mark.parametrize(
    "env, argv, expected",
    [
        ({"FLOWER_BASIC_AUTH": "ops:pw"}, [], {"address": "127.0.0.1", "basic_auth": ["ops:pw"]}),
        (
            {"FLOWER_BASIC_AUTH": "a:1, b:2", "FLOWER_ADDRESS": "0.0.0.0"},
            [],
            {"address": "0.0.0.0", "basic_auth": ["a:1", "b:2"]},
        ),
        ({}, ["celery", "flower", "--basic-auth=ops:pw"], {"address": "127.0.0.1"}),
        ({}, ["celery", "flower", "--auth=.*@example.com"], {"address": "127.0.0.1"}),
        ({"FLOWER_UNAUTHENTICATED": "1"}, [], {"address": "127.0.0.1"}),
    ],
)
def test_flower_gets_a_loopback_address_and_the_auth_it_was_given(env, argv, expected):
    assert settings(env, argv) == expected


@pytest.mark.parametrize("env", [{}, {"FLOWER_UNAUTHENTICATED": "0"}, {"FLOWER_BASIC_AUTH": ""}])
def test_flower_refuses_to_start_with_no_auth_and_says_which_variable_to_set(env):
    with pytest.raises(ConfigError, match="FLOWER_BASIC_AUTH=user:password"):
        settings(env, ["celery", "flower", "--port=5555"])


@pytest.mark.parametrize(
    "raw, bad", [("hunter2x", 1), ("hunter2x:", 1), (":hunter2x", 1), ("a:1,hunter2x", 2)]
)
def test_a_malformed_basic_auth_entry_is_named_by_position_without_echoing_it(raw, bad):
    with pytest.raises(ConfigError, match=f"entry {bad}:") as e:
        basic_auth_users(raw)
    assert "hunter2x" not in str(e.value)


def test_a_kept_local_fleet_prints_the_one_command_that_starts_flower_on_it_with_its_url():
    import io
    import shlex
    from pathlib import Path

    from rich.console import Console

    from fleet.kept import FLOWER_PORT, announce, flower_line

    state = {
        "root": "/tmp/f",
        "env": {"FLEET_BROKER_URL": "redis://127.0.0.1:7001/0"},
        "processes": [{"name": "redis", "pid": 1}],
    }
    line = flower_line(state)
    folder = Path(shlex.split(line)[1])
    assert (folder / "flowerconfig.py").is_file()  # Flower reads it from its working directory
    assert (
        "FLEET_BROKER_URL=redis://127.0.0.1:7001/0" in line and "FLOWER_UNAUTHENTICATED=1" in line
    )
    assert line.endswith(f"-A tasks flower --port={FLOWER_PORT}")
    out = io.StringIO()
    announce(state, Console(file=out, width=300))
    assert line in out.getvalue() and f"http://127.0.0.1:{FLOWER_PORT}/" in out.getvalue()
