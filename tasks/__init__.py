"""The Celery app: ``celery -A tasks worker`` detects the host and consumes its queues."""
from functools import cached_property

from celery import Celery

from fleet.errors import ConfigError

try:  # read the environment now: a bad value ends `celery -A tasks ...` with one line, not a traceback
    import celeryconfig  # noqa: F401
except ConfigError as e:
    raise SystemExit(f"fleet: {e}") from None

from tasks import transport

transport.register()   # redis:// URLs get fleet's queue-ordered transport


class FleetApp(Celery):
    @cached_property
    def Worker(self):
        # `celery -A tasks worker` builds its worker from this: fleet's soft shutdown
        return self.subclass_with_self("tasks.worker:FleetWorker")


app = FleetApp("fleet")
app.config_from_object("celeryconfig")
app.conf.include = ["tasks.train"]

from tasks import worker as _worker  # noqa: E402,F401  (signal handlers pick the queues)
from tasks import control as _control  # noqa: E402,F401  (inspect capability; revoke == fleet cancel)
