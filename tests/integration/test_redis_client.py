"""fleet's Redis clients (state.redis_conn.connect) as the server sees them, made without a
scan of the installed packages."""

from __future__ import annotations

import importlib.metadata

import pytest
import redis

from state.broker import parse
from state.redis_conn import connect

pytestmark = pytest.mark.integration


def test_a_client_tells_the_server_redis_pys_name_and_its_version(redis_url):
    client = connect(parse(redis_url))
    info = client.client_info()
    assert (info["lib-name"], info["lib-ver"]) == ("redis-py", redis.__version__)


def test_a_client_is_made_without_reading_the_installed_packages_metadata(redis_url, monkeypatch):
    """redis-py 7.2+ asks importlib.metadata for its version for every client unless told."""

    def scan(name):
        raise AssertionError(f"importlib.metadata.version({name!r}) read for a client")

    monkeypatch.setattr(importlib.metadata, "version", scan)
    assert connect(parse(redis_url)).ping()
