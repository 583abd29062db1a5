"""Fixtures the integration tests share."""

import pytest

from fleet import cli


@pytest.fixture
def fleet_cli(redis_url):
    """``fleet`` verbs run in this process (``cli.main(argv)``) against the test's Redis."""
    app = cli.app()
    before = app.conf.broker_url
    app.conf.broker_url = redis_url
    app.pool.force_close_all()
    yield cli.main
    app.conf.broker_url = before
    app.pool.force_close_all()


@pytest.fixture
def app(redis_url):
    """The worker's Celery app on the test's Redis."""
    from tasks import app

    app.conf.broker_url = redis_url
    app.pool.force_close_all()
    yield app


@pytest.fixture
def job(redis_url, redis_client):
    """One published job (command `true`) on the test's Redis: its ID."""
    from fleet.manifests import loads
    from fleet.publish import publish
    from tasks import app

    app.conf.broker_url = redis_url
    app.pool.force_close_all()
    manifest = loads('[[jobs]]\nname = "t"\ncommand = ["true"]\n', "m.toml")
    (row,) = publish(app, redis_client, manifest)
    return row.job.job_id
