"""The verbs that read a real Redis (`fleet status`, `why`, `show`, `logs`) load none of the
heavy modules they do not use: a command that should answer at once."""

from __future__ import annotations

import os

import pytest

from tests.harness.cli import imported

pytestmark = pytest.mark.integration

# Celery and kombu (a third of a second); OpenTelemetry's SDK, which redis-py 8 imports when
# it is installed (fleet.cli.redis_import hides it from redis-py); the store's and the
# trainers' libraries; with no search published, the search view and the search config;
# the results query and the exporters; redis-py's asyncio client and importlib.metadata, which
# fleet.cli.redis_import defers (their names are bound, their code never runs).
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
