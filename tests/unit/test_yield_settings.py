"""A host's yield settings (core.settings.YieldSettings) and what `fleet enroll --yield` writes."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from core.constants import YIELD_IGNORE, YIELD_POLL_S, YIELD_RECLAIM_S
from core.errors import ConfigError
from core.settings import WorkerSettings, YieldSettings
from fleet.enroll import UnitPlan, render_unit, yield_values

PLAN = UnitPlan(
    celery="/opt/fleet/.venv/bin/celery",
    code_dir="/opt/fleet",
    env_file="/etc/fleet/worker.env",
    stop_timeout_s=40,
    gpu=True,
)


def test_yielding_is_off_by_default_with_named_defaults():
    s = YieldSettings.from_env({})
    assert s == YieldSettings() and not s.enabled
    assert (s.reclaim_s, s.poll_s, s.ignore, s.check) == (
        YIELD_RECLAIM_S,
        YIELD_POLL_S,
        YIELD_IGNORE,
        (),
    )
    assert WorkerSettings.from_env({"FLEET_STORE_URL": "file:///tmp/s"}).yielding == YieldSettings()


def test_the_busy_check_is_split_like_a_shell_line_and_shown_as_written():
    s = YieldSettings.from_env(
        {
            "FLEET_YIELD": "1",
            "FLEET_YIELD_CHECK": "pgrep -x 'steam client'",
            "FLEET_YIELD_RECLAIM_S": "0",
            "FLEET_YIELD_POLL_S": "0.5",
            "FLEET_YIELD_IGNORE": "Xorg, gnome-shell",
            "FLEET_SIM_GPU_PROCESSES": "/tmp/p.json",
        }
    )
    assert (
        s.enabled
        and s.check == ("pgrep", "-x", "steam client")
        and s.check_name == "pgrep -x 'steam client'"
    )
    assert (s.reclaim_s, s.poll_s, s.ignore, s.sim_processes) == (
        0.0,
        0.5,
        ("Xorg", "gnome-shell"),
        Path("/tmp/p.json"),
    )


@pytest.mark.parametrize(
    "env, named",
    [
        ({"FLEET_YIELD": "sometimes"}, "FLEET_YIELD='sometimes'"),
        ({"FLEET_YIELD_CHECK": "pgrep 'steam"}, "FLEET_YIELD_CHECK="),
        ({"FLEET_YIELD_POLL_S": "0"}, "FLEET_YIELD_POLL_S='0'"),
        ({"FLEET_YIELD_RECLAIM_S": "-1"}, "FLEET_YIELD_RECLAIM_S='-1'"),
        ({"FLEET_YIELD_CHECK_TIMEOUT_S": "x"}, "FLEET_YIELD_CHECK_TIMEOUT_S='x'"),
    ],
)
def test_a_bad_value_is_refused_naming_its_variable(env, named):
    with pytest.raises(ConfigError, match=named.replace("(", r"\(")):
        YieldSettings.from_env(env)


def test_enroll_writes_the_yield_lines_and_checks_them_as_the_worker_will():
    assert yield_values(True, "pgrep -x steam", idle_hint=True, reclaim_s=120, poll_s=1) == {
        "FLEET_YIELD": "1",
        "FLEET_YIELD_CHECK": "pgrep -x steam",
        "FLEET_YIELD_IDLE_HINT": "1",
        "FLEET_YIELD_RECLAIM_S": "120",
        "FLEET_YIELD_POLL_S": "1",
    }
    assert yield_values(True) == {"FLEET_YIELD": "1"}
    with pytest.raises(ConfigError, match="FLEET_YIELD_POLL_S"):
        yield_values(True, poll_s=0)


def test_a_yielding_host_lets_its_worker_see_the_owners_processes():
    assert "ProtectProc=invisible" in render_unit(PLAN)
    unit = render_unit(replace(PLAN, yield_to_owner=True))
    assert "ProtectProc=default" in unit and "ProtectProc=invisible" not in unit
