"""The verbs that read a real Redis (`fleet status`, `why`, `show`, `logs`) load none of the
heavy modules they do not use: a command that should answer at once."""

from __future__ import annotations

import os

import pytest

from tests.harness.cli import imported

pytestmark = pytest.mark.integration

# Celery and kombu (a third of a second); OpenTelemetry's SDK, which redis-py 8 imports when
# it is installed (core.redis_import hides it from redis-py); the store's and the
# trainers' libraries; with no search published, the search view and the search config;
# the results query and the exporters; redis-py's asyncio client, asyncio itself and
# importlib.metadata, which core.redis_import defers (their names are bound, their code
# never runs).
HEAVY = (
    "celery",
    "kombu",
    "fleet.messages",
    "state.app",
    "state.events",
    "opentelemetry",
    "boto3",
    "botocore",
    "torch",
    "numpy",
    "optuna",
    "mlflow",
    "matplotlib",
    "state.search.view",
    "manifest.search",
    "fleet.query.results",
    "fleet.mlflow_export",
    "fleet.optuna_export",
    "redis.asyncio.client",
    "redis.asyncio.connection",
    "redis.asyncio.cluster",
    "importlib.metadata._meta",
    "asyncio.base_events",
)


def _loaded(modules: set[str], names: tuple[str, ...]) -> list[str]:
    """The ``modules`` that are one of ``names`` or inside one."""
    return sorted(m for m in modules for n in names if m == n or m.startswith(f"{n}."))


@pytest.mark.parametrize(
    "verb", [("status",), ("status", "--json"), ("why",), ("show",), ("logs",)], ids=" ".join
)
def test_reading_verbs_load_none_of_the_heavy_modules(verb, redis_url, job):
    argv = verb if verb[0] == "status" else (*verb, job)
    modules, out = imported(dict(os.environ, FLEET_BROKER_URL=redis_url, COLUMNS="200"), *argv)
    assert job[:6] in out or verb == ("logs",)  # it read the published job (logs: none kept)
    assert not _loaded(modules, HEAVY)


def test_status_of_a_fleet_with_no_search_loads_no_manifest_module(redis_url, job):
    modules, _ = imported(dict(os.environ, FLEET_BROKER_URL=redis_url), "status")
    assert not _loaded(modules, ("manifest",))


def test_redis_pys_asyncio_client_works_under_the_deferral(redis_url):
    """A process whose redis-py loaded with asyncio deferred (every `fleet` command) can still
    use its asyncio client: asyncio runs at its first use and the names it lent are its own."""
    import json
    import subprocess
    import sys

    code = (
        "import json, sys\n"
        "from core import redis_import\nredis_import.install()\nimport redis\n"
        "deferred = type(sys.modules['asyncio']).__name__\n"
        "import asyncio, redis.asyncio\n"
        "async def main():\n"
        "    r = redis.asyncio.from_url(sys.argv[1])\n"
        "    await r.set('fleet-test:async', 'yes')\n"
        "    got = await r.get('fleet-test:async')\n"
        "    await r.aclose()\n"
        "    return got.decode()\n"
        "print(json.dumps([deferred, asyncio.run(main())]))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, redis_url], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == ["_Deferred", "yes"]
