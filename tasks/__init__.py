"""The Celery app: ``celery -A tasks worker`` detects the host and consumes its queues."""
from functools import cached_property

from celery import Celery


class FleetApp(Celery):
    @cached_property
    def Worker(self):
        # `celery -A tasks worker` builds its worker from this: fleet's soft shutdown
        return self.subclass_with_self("tasks.worker:FleetWorker")


app = FleetApp("fleet")
app.config_from_object("celeryconfig")
app.conf.include = ["tasks.train"]

from tasks import worker as _worker  # noqa: E402,F401  (signal handlers pick the queues)
