"""The Celery app as a client of the broker: fleet's settings, no task code.

The operator surface (publish, cancel, requeue, Flower's extras) sends messages, task events
and control commands through it. The worker's app (``tasks``) reads the same settings and adds
the task, its transport and its soft shutdown. Nothing here imports ``celeryconfig`` (it sits
above every package): the surface that owns it passes it in.
"""

from __future__ import annotations

from functools import cache
from importlib import import_module
from types import ModuleType

from celery import Celery

from core.errors import ConfigError

APP_NAME = "fleet"


def load_settings(module: str) -> ModuleType:
    """Import ``module`` (``celeryconfig``: it reads the environment, once): a bad value ends
    the command with one line naming the variable, not a traceback."""
    try:
        return import_module(module)
    except ConfigError as e:
        raise SystemExit(f"fleet: {e}") from None


@cache
def client_app(config: ModuleType) -> Celery:
    """This process's client app on ``config`` (the loaded ``celeryconfig``); it never becomes
    Celery's current app, so a worker's app in the same process stays the one its tasks see."""
    app = Celery(APP_NAME, set_as_current=False)
    app.config_from_object(config)
    return app
