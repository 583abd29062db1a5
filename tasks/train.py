"""The one Celery task: decode the job, hand it to ``tasks.execution``, and say in Celery's
terms how the delivery ended (the only place that raises Ignore, Reject or Retry)."""

from __future__ import annotations

from celery.exceptions import Ignore, Reject, Retry

from core.constants import TASK_NAME
from core.errors import TrainingFailed
from manifest.schema import JobSpec
from state.jobrecord import RunEnd
from tasks import app
from tasks.execution import execute
from tasks.run import Ended, Outcome


class FleetTask(app.Task):
    def shadow_name(self, args, kwargs, options):
        """apply_async names the task by its job too, as `fleet publish` does (Celery's shadow)."""
        job = (args or [None])[0]
        return job.get("name") if isinstance(job, dict) else None


@app.task(bind=True, name=TASK_NAME, acks_late=True, track_started=True, base=FleetTask)
def train(self, job: dict) -> dict:
    return settle(execute(self, JobSpec.from_dict(job)))


def settle(ended: Ended) -> dict:
    """The task's result, or the Celery exception that ends the delivery as ``ended`` says."""
    if ended.outcome is Outcome.SUCCEEDED and ended.end is RunEnd.PRUNED:
        raise Ignore()  # it ended PRUNED (tasks.events.pruned): Flower counts no success
    if ended.outcome is Outcome.SUCCEEDED:
        return ended.result or {}
    if ended.outcome is Outcome.FAILED:
        raise TrainingFailed(ended.why)
    # Flower counts it retried, not failed, as fleet status does
    if ended.outcome is Outcome.RETRYING:
        raise Retry(ended.why.partition("\n")[0], exc=TrainingFailed(ended.why))
    if ended.outcome is Outcome.REDELIVER:
        raise Reject(ended.why, requeue=True)
    # released, dropped, refused, stopped: the record says what happened; ack without a result
    raise Ignore()
