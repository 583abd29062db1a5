"""The one Celery task: decode the job and hand it to ``tasks.execution``."""
from __future__ import annotations

from core.constants import TASK_NAME
from manifest.schema import JobSpec
from tasks import app
from tasks.execution import execute


class FleetTask(app.Task):
    def shadow_name(self, args, kwargs, options):
        """apply_async names the task by its job too, as `fleet publish` does (Celery's shadow)."""
        job = (args or [None])[0]
        return job.get("name") if isinstance(job, dict) else None


@app.task(bind=True, name=TASK_NAME, acks_late=True, track_started=True, base=FleetTask)
def train(self, job: dict) -> dict:
    return execute(self, JobSpec.from_dict(job))
