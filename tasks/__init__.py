"""The Celery app: ``celery -A tasks worker`` detects the host and consumes its queues."""

from core import redis_import

# redis-py without OpenTelemetry's SDK and its unused asyncio client, as the `fleet` CLI loads
# it: some 0.15 s of CPU of every worker's start (nothing if redis-py is already loaded)
redis_import.install()

from functools import cached_property  # noqa: E402

from celery import Celery  # noqa: E402

from state.app import APP_NAME, load_settings  # noqa: E402

load_settings("celeryconfig")  # a bad value ends `celery -A tasks ...` with one line

from tasks import results, transport  # noqa: E402

transport.register()  # redis:// URLs get fleet's queue-ordered transport
results.register()  # and results whose store waits out an outage


class FleetApp(Celery):
    @cached_property
    def Worker(self):
        # `celery -A tasks worker` builds its worker from this: fleet's soft shutdown
        return self.subclass_with_self("tasks.worker:FleetWorker")


app = FleetApp(APP_NAME)
app.config_from_object("celeryconfig")
app.conf.include = ["tasks.train"]

from tasks import control as _control  # noqa: E402,F401  (inspect capability; revoke == fleet cancel)
from tasks import worker as _worker  # noqa: E402,F401  (signal handlers pick the queues)
