"""The one Celery task: decode the job and hand it to ``tasks.execution``."""
from __future__ import annotations

from fleet.constants import TASK_NAME
from manifest.schema import JobSpec
from tasks import app
from tasks.execution import execute


@app.task(bind=True, name=TASK_NAME, acks_late=True, track_started=True)
def train(self, job: dict) -> dict:
    return execute(self, JobSpec.from_dict(job))
