"""The Celery app as a client of the broker: fleet's settings, no task code.

The operator surface (publish, cancel, requeue, Flower's extras) sends messages, task events
and control commands through it. The worker's app (``tasks``) reads the same settings and adds
the task, its transport and its soft shutdown.
"""
from __future__ import annotations

from functools import cache

from celery import Celery

from core.errors import ConfigError

APP_NAME = "fleet"


def load_settings() -> None:
    """Read ``celeryconfig`` (the environment, once): a bad value ends the command with one
    line naming the variable, not a traceback."""
    try:
        import celeryconfig  # noqa: F401
    except ConfigError as e:
        raise SystemExit(f"fleet: {e}") from None


@cache
def client_app() -> Celery:
    """This process's client app; it never becomes Celery's current app, so a worker's
    app in the same process stays the one its tasks see."""
    load_settings()
    app = Celery(APP_NAME, set_as_current=False)
    app.config_from_object("celeryconfig")
    return app
