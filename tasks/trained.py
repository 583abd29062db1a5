"""Trained output is durable: a worker killed after its trainer exited does not lose the work.

Two pieces of evidence survive a SIGKILL of the worker: the job's supervisor writes
``.fleet-exit.json`` into the job's work dir the moment the job exits (``tasks.workdirs``), and the
worker then marks the record ``trained`` (host, work dir; ``state/lua/trained.lua``), which
keeps the job with that run for ``FLEET_TRAINED_GRACE_S`` after its last heartbeat.

When the worker starts again on the same host, ``start`` looks at every dead run folder:
one whose job exited 0 and whose record still belongs to that run is taken back under the
dead run's token, bundled, uploaded and recorded like any run; every other one is removed.
If the host never comes back, the grace runs out and the reaper hands the job on: it is
trained again elsewhere, which is the only way left to get its output.
"""
from __future__ import annotations

import json
import logging
import threading
import time
from pathlib import Path

import redis
from celery.exceptions import Ignore

from core.constants import TAIL_LINES
from core.errors import FleetError
from manifest.schema import JobSpec
from tasks import checkpoint, runner, workdirs
from tasks.lease import LeaseKeeper

log = logging.getLogger("fleet.trained")
MARK_TRIES = 5     # about 6 s of Redis retries; .fleet-exit.json on disk covers a longer outage


def run_info(job: JobSpec, token: str, attempts: int, host: str) -> dict:
    """What a run folder's run.json says: enough to finish the run after its worker died."""
    return {"job": job.to_dict(), "token": token, "attempts": attempts, "host": host,
            "started_at": time.time()}


def mark(ctx, job: JobSpec, token: str, work: Path) -> None:
    """The trainer exited 0: say so in the record before bundling starts."""
    from tasks.execution import _redis_retry

    grace_s = ctx.app.conf.fleet_trained_grace_s
    try:
        ok = _redis_retry(ctx, lambda: ctx.records.mark_trained(job.job_id, token, ctx.hostname, str(work),
                                                                grace_s), "mark trained", tries=MARK_TRIES)
    except redis.RedisError as e:
        log.warning("could not mark %s trained (%s); its exit status is on disk in %s", job.name, e, work.parent)
        return
    if not ok:
        log.warning("%s trained, but the run no longer owns the job", job.name)


def start(ctx) -> threading.Thread:
    """At worker start: finish dead runs' trained output, remove every other dead run folder."""
    thread = threading.Thread(target=finish_dead_runs, args=(ctx,), name="fleet-trained", daemon=True)
    thread.start()
    return thread


def finish_dead_runs(ctx) -> None:
    for run in workdirs.dead(ctx.work_root):
        keep = False
        try:
            if run.returncode == 0 and run.info.get("job"):
                _finish(ctx, run)
            else:
                log.info("removing %s: its run died before the job finished", run.work.parent)
        except redis.RedisError as e:   # cannot tell whose the job is: the next start tries again
            log.warning("kept %s for the next start: Redis unavailable (%s)", run.work.parent, e)
            keep = True
        except Exception:   # one bad folder never stops the worker: it is removed all the same
            log.exception("could not finish the trained output in %s", run.work.parent)
        finally:
            (workdirs.release if keep else workdirs.remove)(run.work)


def _finish(ctx, run: workdirs.DeadRun) -> None:
    from tasks.execution import _redis_retry, _store

    job, token = JobSpec.from_dict(run.info["job"]), run.info["token"]
    answer = _redis_retry(ctx, lambda: ctx.records.resume_trained(job.job_id, token, ctx.hostname, str(run.work)),
                          "resume trained")
    if answer != "ok":
        log.info("removing %s: %s trained there, but the job is %s now", run.work.parent, job.name, answer)
        return
    started = float(run.info.get("started_at") or time.time())
    outcome = _outcome(run, started)
    log.warning("finishing %s from the output its dead run left in %s (no re-train)", job.name, run.work)
    try:
        with LeaseKeeper(ctx.records, job.job_id, token) as lease:
            result = _store(None, ctx, job, token, int(run.info.get("attempts") or 1), lease, run.work, None,
                            started, outcome)
    except (Ignore, FleetError) as e:   # taken over, cancelled, or the worker stopped while uploading
        log.warning("did not finish %s from %s: %s", job.name, run.work, e or type(e).__name__)
        return
    checkpoint.drop(ctx, job)
    log.warning("finished %s from its dead run's output: %s", job.name, result["artifact_uri"])


def _outcome(run: workdirs.DeadRun, started: float) -> runner.RunOutcome:
    """What the runner would have returned, rebuilt from the job's log and .fleet-exit.json."""
    lines = []
    try:
        lines = (run.work / "fleet-log.txt").read_text(errors="replace").splitlines()
    except OSError:
        pass
    metrics: dict = {}
    for line in lines:
        if line.startswith(runner.METRIC_PREFIX):
            try:
                metrics.update(json.loads(line[len(runner.METRIC_PREFIX):]))
            except (TypeError, ValueError):
                pass
    ended = float((run.exit or {}).get("at") or time.time())
    return runner.RunOutcome(0, None, max(0.0, ended - started), lines[-TAIL_LINES:], metrics)
