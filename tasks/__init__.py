"""The Celery app: ``celery -A tasks worker`` detects the host and consumes its queues."""
from celery import Celery

app = Celery("fleet")
app.config_from_object("celeryconfig")
app.conf.include = ["tasks.train"]

from tasks import worker as _worker  # noqa: E402,F401  (signal handlers pick the queues)
