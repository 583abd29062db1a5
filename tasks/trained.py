"""Trained output is durable: a worker killed after its trainer exited does not lose the work.

Two pieces of evidence survive a SIGKILL of the worker: the job's supervisor writes
``.fleet-exit.json`` into the job's work dir the moment the job exits (``tasks.workdirs``), and the
worker then marks the record ``trained`` (host, work dir; ``state/lua/trained.lua``), which
keeps the job with that run for ``FLEET_TRAINED_GRACE_S`` after its last heartbeat.

When the worker dies, its watchman (``tasks.watchman``), or else the worker started again on
the same host (``start``), looks at every dead run folder:
one whose job exited 0 and whose record still belongs to that run is taken back under the
dead run's token, bundled, uploaded and recorded like any run; every other one is removed,
and its job handed on at once (``hand_on``) instead of after its lease. A trained run that
cannot be finished here (an I/O or store error while bundling, not a Redis outage) keeps its
folder for the next try and its job is handed on at once, uncounted: the next try still
finishes it if nobody claimed the job meanwhile.
If the host never comes back, the grace runs out and the reaper hands the job on: it is
trained again elsewhere, which is the only way left to get its output.
"""

from __future__ import annotations

import logging
import threading
import time

import redis

from core.constants import TAIL_LINES
from manifest.schema import JobSpec
from state.jobrecord import JobState, record_end
from tasks import checkpoint, joblog, metrichistory, runner, runscope, supervisor, upload, workdirs
from tasks.host import HostContext
from tasks.lease import LeaseKeeper
from tasks.retry import Backoff, retry_redis
from tasks.run import Outcome, Run, RunEnd, RunStopped
from trainers.protocol import parse_metric_line

log = logging.getLogger("fleet.trained")
# about 6 s of Redis retries; .fleet-exit.json on disk covers a longer outage
MARK_BACKOFF = Backoff.doubling(0.2, 5.0, tries=6)
# a dead run's supervisor may be stopping its job still (SIGTERM, then SIGKILL after its
# GRACE_S): a trainer that checkpoints on SIGTERM gets that long before it is killed here
DEAD_RUN_GRACE_S = supervisor.GRACE_S + 1.0


def run_info(job: JobSpec, token: str, attempts: int, host: str, runs: int = 0) -> dict:
    """What a run folder's run.json says: enough to finish the run after its worker died
    (``runs``: the run's number in `fleet logs`)."""
    return {
        "job": job.to_dict(),
        "token": token,
        "attempts": attempts,
        "host": host,
        "runs": runs,
        "started_at": time.time(),
    }


def mark(ctx: HostContext, run: Run) -> None:
    """The trainer exited 0: say so in the record before bundling starts. Raises RunStopped
    when the record says the job is no longer this run's: its output is not stored."""
    job = run.job
    grace_s = ctx.app.conf.fleet_trained_grace_s
    try:
        ok = retry_redis(
            lambda: ctx.records.mark_trained(
                job.job_id, run.token, ctx.hostname, str(run.work), grace_s
            ),
            what="mark trained",
            stop=ctx.shutdown,
            backoff=MARK_BACKOFF,
        )
    except redis.RedisError as e:
        log.warning(
            "could not mark %s trained (%s); its exit status is on disk in %s",
            job.name,
            e,
            run.work.parent,
        )
        return
    if not ok:  # superseded (taken over in a partition) or cancelled: nothing of it is stored
        log.warning(
            "%s trained, but the run no longer owns the job; its output is not stored", job.name
        )
        raise RunStopped(Outcome.STOPPED, "trained, but the run no longer owns the job")


def start(ctx: HostContext) -> threading.Thread:
    """At worker start: finish dead runs' trained output, remove every other dead run folder."""
    thread = threading.Thread(
        target=finish_dead_runs, args=(ctx,), name="fleet-trained", daemon=True
    )
    thread.start()
    return thread


def finish_dead_runs(ctx: HostContext) -> None:
    """Finish what dead runs trained; hand on at once the jobs of those that had not (their
    worker is gone, so their leases need not be waited out). Called by a starting worker and
    by the watchman of a worker that died (tasks.watchman)."""
    lost: list[tuple[str, str]] = []
    for dead in workdirs.dead(ctx.work_root):
        if not processes_ended(dead):  # not handed on while it runs: its lease decides
            workdirs.release(dead.work)
            continue
        keep = False
        try:
            if dead.returncode == 0 and dead.info.get("job"):
                _finish(ctx, dead)
            else:
                log.info("removing %s: its run died before the job finished", dead.work.parent)
                lost += _run_of(dead)
        except redis.RedisError as e:  # cannot tell whose the job is: the next start tries again
            log.warning("kept %s for the next start: Redis unavailable (%s)", dead.work.parent, e)
            keep = True
        except Exception as e:
            # The folder is the only trained copy: kept, so the next start (or watchman) can
            # finish it while the job waits unclaimed; the job is handed on now rather than
            # held for the trained grace and then trained again anyway.
            log.exception("could not finish the trained output in %s", dead.work.parent)
            keep = True
            _hand_on_unfinished(ctx, dead, f"{type(e).__name__}: {e}")
        finally:
            (workdirs.release if keep else workdirs.remove)(dead.work)
    hand_on(ctx, lost)


def processes_ended(dead: workdirs.DeadRun) -> bool:
    """No process of the dead run is left: those its supervisor is still stopping get its
    grace first, then all of them SIGKILL (tasks.runscope); False if one would not die."""
    scope = workdirs.scope(dead.work)
    left = runscope.end(scope, runscope.cgroup_of(scope), grace_s=DEAD_RUN_GRACE_S)
    if left:
        log.error(
            "processes %s of the dead run in %s would not die; its job waits for its lease",
            left,
            dead.work.parent,
        )
    return not left


def _hand_on_unfinished(ctx: HostContext, dead: workdirs.DeadRun, error: str) -> None:
    """Back to its queue, uncounted, the job of a dead run whose trained output could not be
    finished here (the trainer did its part; storing it failed on this host). Its trained
    marker stays, so while nobody has claimed the job, this host's next try still finishes it
    from the kept folder (lua/trained.lua's 'resume'); a claim elsewhere clears the marker."""
    runs = _run_of(dead)
    if not runs:  # its run.json does not say whose it was: its lease hands it on
        return
    ((job_id, token),) = runs
    why = f"handed on: its trained output could not be finished on {ctx.hostname}: {error}"
    try:
        handed = retry_redis(
            lambda: ctx.records.finish(
                job_id,
                token,
                JobState.QUEUED,
                count_attempt=False,
                last_error=why,
                **record_end(RunEnd.HANDED_BACK, why),
            ),
            what="hand on an unfinished trained run",
            stop=ctx.shutdown,
        )
    except redis.RedisError as e:
        log.warning("could not hand on %s now (%s); its trained grace will", job_id, e)
        return
    if handed:
        log.warning("%s %s; %s is kept for the next try", job_id, why, dead.work)


def _run_of(dead: workdirs.DeadRun) -> list[tuple[str, str]]:
    """(job id, token) of a dead run, or nothing where its run.json does not say."""
    job_id, token = (dead.info.get("job") or {}).get("job_id"), dead.info.get("token")
    return [(job_id, token)] if isinstance(job_id, str) and isinstance(token, str) else []


def hand_on(ctx: HostContext, runs: list[tuple[str, str]]) -> None:
    """End the leases of runs known dead and requeue their jobs now (lua/reap.lua); a run
    that was already superseded is left alone. If Redis cannot be reached, the leases run
    out and the reaper does the same later."""
    if not runs:
        return
    try:
        lines = retry_redis(
            lambda: ctx.records.reap_dead(runs), what="hand on dead runs", stop=ctx.shutdown
        )
    except redis.RedisError as e:
        log.warning("could not hand on %d dead run(s) now (%s); their leases will", len(runs), e)
        return
    for line in lines:
        log.warning("a run's worker died: %s", line)


def _finish(ctx: HostContext, dead: workdirs.DeadRun) -> None:
    job, token = JobSpec.from_dict(dead.info["job"]), dead.info["token"]
    answer = retry_redis(
        lambda: ctx.records.resume_trained(job.job_id, token, ctx.hostname, str(dead.work)),
        what="resume trained",
        stop=ctx.shutdown,
    )
    if answer != "ok":
        log.info(
            "removing %s: %s trained there, but the job is %s now",
            dead.work.parent,
            job.name,
            answer,
        )
        return
    started = float(dead.info.get("started_at") or time.time())
    outcome = _outcome(dead, started)
    _complete_history(ctx, job, dead)
    log.warning(
        "finishing %s from the output its dead run left in %s (no re-train)", job.name, dead.work
    )
    try:
        with LeaseKeeper(ctx.records, job.job_id, token) as lease:
            run = Run(
                job, token, int(dead.info.get("attempts") or 1), lease, dead.work, started=started
            )
            result = upload.store_result(ctx, run, outcome)
    # taken over, cancelled, or the worker stopped while uploading (its bundle kept in pending/)
    except RunStopped as e:
        log.warning("did not finish %s from %s: %s", job.name, dead.work, e or type(e).__name__)
        return
    checkpoint.drop(ctx, job)
    log.warning("finished %s from its dead run's output: %s", job.name, result["artifact_uri"])
    _end_mark(ctx, job, dead.info, "finished from its output after the worker restarted")


def _run_number(info: dict) -> int:
    return int(info.get("runs") or info.get("attempts") or 0)


def _complete_history(ctx: HostContext, job: JobSpec, dead: workdirs.DeadRun) -> None:
    """The dead run's last metric lines may never have reached the job's history (it is sent
    once a second): what its log holds past the history's last step of that run goes now."""
    reports = list(filter(None, map(parse_metric_line, _log_lines(dead))))
    at = _ended_at(dead)
    retry_redis(
        lambda: metrichistory.complete(ctx.redis, job.job_id, _run_number(dead.info), reports, at),
        what="complete metric history",
        stop=ctx.shutdown,
    )


def _end_mark(ctx: HostContext, job: JobSpec, info: dict, detail: str) -> None:
    """`fleet logs` shows the dead run ended, not lost: its own end mark died with its worker."""
    run = _run_number(info)
    try:
        joblog.mark_end(
            ctx.redis,
            job.job_id,
            run=run,
            worker=str(info.get("host") or ctx.hostname),
            how=RunEnd.SUCCEEDED,
            detail=detail,
        )
    except redis.RedisError as e:  # the record says succeeded; only the log's mark is missing
        log.warning("could not write %s's end mark to its log: %s", job.name, e)


def _log_lines(dead: workdirs.DeadRun) -> list[str]:
    try:
        return (dead.work / workdirs.LOG_FILE).read_text(errors="replace").splitlines()
    except OSError:
        return []


def _ended_at(dead: workdirs.DeadRun) -> float:
    return float((dead.exit or {}).get("at") or time.time())


def _outcome(dead: workdirs.DeadRun, started: float) -> runner.RunOutcome:
    """What the runner would have returned, rebuilt from the job's log and .fleet-exit.json."""
    lines = _log_lines(dead)
    metrics: dict = {}
    for report in filter(None, map(parse_metric_line, lines)):
        metrics.update(report)
    return runner.RunOutcome(
        0, None, max(0.0, _ended_at(dead) - started), lines[-TAIL_LINES:], metrics
    )
