"""Run one delivered job, exactly once: claim it, run its process, hand its output on.

The steps of one job, each in its own module: ``state.records`` decides who runs
(the claim), ``tasks.lease`` keeps the claim alive, ``tasks.runner`` runs the process
group, ``tasks.trained`` marks the output durable, ``tasks.upload`` bundles, stores and
records it. How a run ends is decided by ``tasks.runend`` over the facts gathered here, and
carried out here (``CARRY_OUT``). Every way a delivery can end is an ``Outcome``
(``tasks.run``) handed back to ``tasks.train``, the only place that speaks Celery's
Ignore/Reject.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
import uuid
from dataclasses import replace
from pathlib import Path

import redis

from artifacts.data import fetch
from artifacts.pyenv import EnvBuildFailed
from core.constants import DATA_CACHE_DIR, TAIL_LINES
from core.ids import short_id
from manifest.schema import JobSpec
from state import deadletter
from state.jobrecord import JobState, ran_on, record_end
from state.records import Claim
from tasks import (
    checkpoint,
    events,
    gang,
    inputs,
    isolation,
    pbt,
    rendezvous,
    runend,
    runner,
    ticks,
    trained,
    trial,
    upload,
    vramwatch,
    workdirs,
    workspace,
)
from tasks.host import HostContext, context
from tasks.joblog import JobLog
from tasks.lease import LeaseKeeper
from tasks.metrichistory import MetricHistory
from tasks.retry import Backoff, retry_redis
from tasks.run import (
    Ended,
    Outcome,
    Run,
    RunEnd,
    RunStopped,
    Stop,
    failure_end,
    failure_reason,
    run_end,
)
from tasks.runend import Decision, Trouble, Verdict
from trainers import protocol

log = logging.getLogger("fleet.execution")
# Task states (Flower, AsyncResult) of a delivery that ended without a result of its own.
# A custom name: Celery's RETRY is an exception state whose meta must be an error. A cancelled
# delivery ends REVOKED (tasks.events).
REQUEUED_STATE = "REQUEUED"
NO_RECORD = "no record"  # the claim's answer for a message `fleet publish` never recorded
# a run that stopped itself, cut off from Redis, waits this way for Redis to answer again
UNTIL_REDIS_ANSWERS = Backoff.doubling(0.2, 5.0)


def execute(task, job: JobSpec) -> Ended:
    """Claim the delivered job and run it; how the delivery ended. A search's trial advances
    its search once the delivery is over, however it ended (tasks.trial)."""
    try:
        return _execute(task, job)
    finally:
        trial.ended(context().redis, job)


def _execute(task, job: JobSpec) -> Ended:
    ctx = context()
    if ctx.shutdown.is_set():  # delivered while the worker is stopping: leave it to the next one
        return Ended(Outcome.REDELIVER, "worker shutting down")
    queue = (task.request.delivery_info or {}).get("routing_key") or ""
    token = uuid.uuid4().hex
    if job.gang:  # its members take seats first; the one that fills the last claims
        formed = gang.form(ctx, job, queue, token, lambda why: events.forming(task, why))
        if isinstance(formed, Ended):
            if formed.outcome is Outcome.RELEASED:  # its seat given back: queued, as Flower says
                events.requeued(task, formed.why)
            return formed
        claim = Claim(True, "gang", formed.attempts, formed.runs)
        token, seat = formed.token, formed.seat
    else:
        adopt = bool(ctx.app.conf.get("fleet_adopt_unpublished"))
        claim = retry_redis(
            lambda: ctx.records.claim(
                job.job_id, ctx.hostname, token, job.to_dict(), queue, adopt=adopt
            ),
            what="claim",
            stop=ctx.shutdown,
        )
        seat = None
    if claim.reason == NO_RECORD:
        return _refuse_unpublished(task, ctx, job, queue)
    if not claim.run:
        # a duplicate (redelivery, fallback copy, second publish): ack it, and leave the
        # task's stored result to the run that counts
        log.info("dropping delivery of %s (%s): %s", job.name, short_id(job.job_id), claim.reason)
        if claim.reason == JobState.CANCELLED:
            events.revoked(task, "cancelled while queued")
        return Ended(Outcome.DROPPED, claim.reason)
    if claim.attempts > 1:
        events.restarted(task, claim.attempts)
    work = workdirs.create(
        ctx.work_root,
        job.job_id,
        trained.run_info(job, token, claim.attempts, ctx.hostname, claim.runs),
    )
    try:
        with (
            LeaseKeeper(ctx.records, job.job_id, token) as lease,
            JobLog(
                ctx.redis, gang.log_id(job.job_id, seat), run=claim.runs, worker=ctx.hostname
            ) as output,
        ):
            ended = _with_grant(
                task,
                ctx,
                Run(
                    job,
                    token,
                    claim.attempts,
                    lease,
                    work,
                    queue=queue,
                    output=output,
                    number=claim.runs,
                    seat=seat,
                ),
            )
            output.end(*run_end(ended, lease.reason, lease.record))
            return ended
    finally:
        workdirs.remove(work)


def _with_grant(task, ctx: HostContext, run: Run) -> Ended:
    """Run holding what the transport reserved for this delivery (GPUs, cores, RAM), and
    give it back once the job's whole process group has exited, however the run ends."""
    claimed = ctx.gate.claim(run.job.job_id)
    if claimed is None:  # delivered around the gate (e.g. no reservation made): reserve now
        tag = f"run:{run.token}"
        grant = ctx.gate.take(tag, ctx.gate.demand(run.job.needs, run.queue), run.job.job_id)
        if grant is None:
            return _release(task, ctx, run, "its resources are held by other jobs here")
        ctx.gate.claim(run.job.job_id)
    else:
        tag, grant = claimed
    try:
        gpus = tuple(ctx.capability.cuda_devices[i] for i in grant.gpus)
    except IndexError:
        ctx.gate.release(tag)
        raise
    run = replace(run, gpus=gpus, grant=grant, started=time.time())
    # registered until its grant is released: a policy may hand it back (tasks.handback), and
    # whatever takes its place starts after its checkpoint sync
    with ctx.runs.running(run):
        try:
            held = {"gpu": ",".join(f"{d.index}:{d.name}" for d in gpus)} if gpus else {}
            _record_held(ctx, run, cores=len(grant.cores), **held)  # what `fleet usage` counts
            return _guarded(task, ctx, run)
        finally:
            ctx.gate.release(tag)


def _record_held(ctx: HostContext, run: Run, **held) -> None:
    """Write what the run holds to its record now, not with its next heartbeat: a run shorter
    than one beat would otherwise end with no cores or GPUs on its record, and `fleet usage`
    would not count them. The lease carries them too, in case Redis does not answer now."""
    run.lease.report(**held)
    try:
        ctx.records.heartbeat(run.job.job_id, run.token, **held)  # fenced by the run's token
    except redis.RedisError as e:
        log.debug("held resources of %s go with its next heartbeat: %s", run.job.name, e)


def _guarded(task, ctx: HostContext, run: Run) -> Ended:
    try:
        return _run(task, ctx, run)
    except RunStopped as e:
        log.warning("stopped %s: %s", run.job.name, e.why)
        return Ended(e.outcome, e.why)
    except redis.RedisError:
        # outlived every retry: the record cannot be written, so the lease (and a kept
        # bundle, if training finished) decides what happens next
        raise
    except Exception as e:  # anything unforeseen ends the run, recorded, not left to a lease
        # the record keeps one line; the traceback, which says where, goes to this worker's log
        log.exception(
            "%s (%s) failed on %s with an unforeseen error",
            run.job.name,
            short_id(run.job.job_id),
            ctx.hostname,
        )
        return _end(
            task,
            ctx,
            run,
            None,
            _happened(ctx, run, Trouble.UNFORESEEN, f"{type(e).__name__}: {e}"),
        )


def _refuse_unpublished(task, ctx: HostContext, job: JobSpec, queue: str) -> Ended:
    """A message no `fleet publish` recorded (e.g. apply_async): set aside, not run."""
    why = (
        f"no record for job {job.job_id}: not published by fleet (set FLEET_ADOPT_UNPUBLISHED=1 "
        "on workers to run such messages)"
    )
    log.error("refusing delivery of %s (%s): %s", job.name, short_id(job.job_id), why)
    raw = json.dumps(
        {
            "id": task.request.id,
            "task": task.name,
            "args": task.request.args,
            "delivery_info": task.request.delivery_info,
        }
    )
    retry_redis(
        lambda: deadletter.set_aside(
            ctx.redis, deadletter.entry(raw, why, queue, worker=ctx.hostname)
        ),
        what="set aside",
        stop=ctx.shutdown,
    )
    return Ended(Outcome.REFUSED, why)


def _requeue_uncounted(
    ctx: HostContext, run: Run, last_error: str, why: str, fields: dict, *, what: str
) -> bool:
    """Put the job back in its queue with this attempt uncounted, its end recorded as handed
    back; False when the run no longer owns the job."""
    return retry_redis(
        lambda: ctx.records.finish(
            run.job.job_id,
            run.token,
            JobState.QUEUED,
            count_attempt=False,
            last_error=last_error,
            **fields,
            **record_end(RunEnd.HANDED_BACK, f"handed back: {why}"),
        ),
        what=what,
        stop=ctx.shutdown,
    )


def _release(task, ctx: HostContext, run: Run, why: str) -> Ended:
    """Hand the job back to its queue, without counting this attempt."""
    _requeue_uncounted(ctx, run, f"released: {why}", why, {}, what="release")
    log.warning("released %s back to its queue: %s", run.job.name, why)
    return _requeued(task, run, why)


def _requeued(task, run: Run, why: str) -> Ended:
    # the job will run again under this task id: no SUCCESS for this delivery, and no
    # PROGRESS left behind either
    _task_state(task, REQUEUED_STATE, {"job_id": run.job.job_id, "name": run.job.name, "why": why})
    events.requeued(task, why)
    return Ended(Outcome.RELEASED, why)


def _task_state(task, state: str, meta: dict) -> None:
    try:
        task.update_state(state=state, meta=meta)
    except Exception as e:  # the result backend is down: the job record is what counts
        log.debug("%s state update failed: %s", state, e)


def _run(task, ctx: HostContext, run: Run) -> Ended:
    job, work = run.job, run.work
    data_path = (
        fetch(
            job.data,
            ctx.work_root / DATA_CACHE_DIR,
            store_factory=ctx.open_store,
            into=work,
            cache_bytes=ctx.settings.data_cache_bytes,
        )
        if job.data
        else None
    )
    started = inputs.prepare(ctx, run)  # a pipeline follower's: params_from's values, bundles
    try:
        # its code copied in, its environment held
        with workspace.prepared(task, ctx, run) as python:
            argv, env = _argv_env(started, work, data_path, run, ctx.job_user)
            argv = workspace.adapt(argv, env, job, python)
            env.update(workspace.job_variables(job, ctx))
            if run.seat is not None:  # torch.distributed's variables; torchrun per GPU
                # rank 0's port taken since it joined: its partners hear how it ended through
                # the lease
                if taken := rendezvous.port_taken(ctx.settings, run.seat):
                    return _end(
                        task, ctx, run, None, _happened(ctx, run, Trouble.PORT_TAKEN, taken)
                    )
                env.update(run.seat.environment(job.needs.gpu_count))
                argv = run.seat.argv(argv, job.needs.gpu_count, job.job_id)
            isolation.hand_over(work, ctx.job_user)  # the data pin lives in the cache, not in work
            # a gang's rank 0 alone speaks for its trial: another rank's lines stay in its log
            pruning = (
                trial.watch(ctx.redis, job, run.token, lambda: ctx.runs.wake(job.job_id))
                if run.lead
                else None
            )
            outcome = _run_process(task, ctx, run, argv, env, pruning)
    except workspace.JobEnvFailed as e:
        return _end(task, ctx, run, None, _happened(ctx, run, Trouble.JOB_ENV, str(e)))
    except EnvBuildFailed as e:
        log.warning("the environment of %s could not be built here: %s", job.name, e)
        error = f"{type(e).__name__}: {e}"
        return _end(task, ctx, run, None, _happened(ctx, run, Trouble.ENV_BUILD, error))
    ran_to_end = pruning is not None and pruning.ran_to_end()
    return _end(
        task, ctx, run, outcome, _happened(ctx, run, outcome=outcome, ran_to_end=ran_to_end)
    )


def _happened(
    ctx: HostContext,
    run: Run,
    trouble: runend.Trouble | None = None,
    error: str = "",
    *,
    outcome: runner.RunOutcome | None = None,
    ran_to_end: bool = False,
) -> runend.Happened:
    """What happened to ``run``, read where it is kept (its outcome, its lease, this host)."""
    job, seat = run.job, run.seat
    return runend.Happened(
        returncode=outcome.returncode if outcome else None,
        stopped=outcome.stopped if outcome else None,
        trouble=trouble,
        error=error,
        ran_to_end=ran_to_end,
        cut_off=run.lease.cut_off_s is not None,
        lease_stop=run.lease.reason,
        asked=ctx.runs.asked(job.job_id),
        shutting_down=ctx.shutdown.is_set(),
        attempt=run.attempt,
        max_attempts=job.max_attempts,
        gang_attempts=ctx.records.max_attempts,
        checkpointed=bool(job.checkpoint),
        gang=runend.GangFacts(seat.rank, seat.nodes) if seat is not None else None,
    )


def _end(
    task, ctx: HostContext, run: Run, outcome: runner.RunOutcome | None, h: runend.Happened
) -> Ended:
    """Decide how the run ends (tasks.runend), asking its gang first where the decision
    needs its answer, and carry the decision out."""
    while (d := runend.decide(h)).verdict is Verdict.LOOK:
        h = replace(
            h, gang=gang.look(ctx, run, d.look, h.gang), asked=ctx.runs.asked(run.job.job_id)
        )
    if d.gang_done:
        gang.done(ctx, run, rank_logs=d.rank_logs)
    return CARRY_OUT[d.verdict](task, ctx, run, outcome, d, h)


def _taken(task, ctx: HostContext, run: Run, outcome, h: runend.Happened) -> Ended:
    """Writing the run's end found the job no longer this run's: how it ends then, decided
    again with what its lease says now (it writes nothing more)."""
    lease = run.lease
    h = replace(h, owned=False, lease_stop=lease.reason, cut_off=lease.cut_off_s is not None)
    taken = runend.decide(h)
    return CARRY_OUT[taken.verdict](task, ctx, run, outcome, taken, h)


def _released(task, ctx: HostContext, run: Run, outcome, d: Decision, h) -> Ended:
    return _release(task, ctx, run, d.why)


def _handed_back(task, ctx: HostContext, run: Run, outcome, d: Decision, h) -> Ended:
    """A policy handed the run back (tasks.handback): its checkpoint is synced, the job goes
    back to its queue with this attempt uncounted and the policy's fields recorded."""
    back = d.back
    # what the job goes back with (a PBT exploit: the donor's checkpoint, new values) first
    if not (back.prepare is None or back.prepare()) or not _requeue_uncounted(
        ctx, run, f"handed back: {d.why}", d.why, back.fields, what="hand back"
    ):
        return _taken(task, ctx, run, outcome, h)
    log.warning("handed %s back to its queue: %s", run.job.name, back.why)
    return _requeued(task, run, back.why)


def _rank_0_hands_back(task, ctx: HostContext, run: Run, outcome, d: Decision, h) -> Ended:
    """A gang's other rank: rank 0 syncs and requeues the gang."""
    log.warning("stopped %s (gang rank %d): %s", run.job.name, run.seat.rank, d.why)
    return _requeued(task, run, d.why)


def _pruned(task, ctx: HostContext, run: Run, outcome, d: Decision, h) -> Ended:
    """Its search's pruner stopped it: its outputs are kept, the trial recorded pruned."""
    result = upload.store_result(ctx, run, outcome, JobState.PRUNED)
    checkpoint.drop(ctx, run.job)
    events.pruned(task, result)
    return Ended(Outcome.SUCCEEDED, result=result, end=RunEnd.PRUNED, detail=d.detail)


def _succeeded(task, ctx: HostContext, run: Run, outcome, d: Decision, h) -> Ended:
    trained.mark(ctx, run)
    result = upload.store_result(ctx, run, outcome)
    checkpoint.drop(ctx, run.job)
    return Ended(Outcome.SUCCEEDED, result=result)


def _gang_rerun(task, ctx: HostContext, run: Run, outcome, d: Decision, h) -> Ended:
    """The gang's one record back to its queue (or failed, out of attempts); every partner
    hears it through its lease."""
    if not gang.requeue(ctx, run, d.why, again=d.again):
        return _taken(task, ctx, run, outcome, h)
    if d.again:  # the gang runs again as a whole: queued, as Flower says
        events.requeued(task, d.why)
    return Ended(
        Outcome.RELEASED if d.again else Outcome.FAILED, d.why, end=RunEnd.LOST, detail=d.detail
    )


def _ended_here(outcome_: Outcome):
    """A verdict that ends the delivery as it is, writing nothing: the record says the rest."""
    return lambda task, ctx, run, outcome, d, h: Ended(outcome_, d.why, detail=d.detail)


def _member_done(task, ctx: HostContext, run: Run, outcome, d: Decision, h) -> Ended:
    return Ended(Outcome.MEMBER, d.why, end=RunEnd.SUCCEEDED, detail=d.detail)


def _argv_env(
    started: inputs.Started,
    work: Path,
    data_path: Path | None,
    run: Run,
    user: isolation.JobUser | None = None,
) -> tuple[list[str], dict]:
    job = started.job  # its hyper with params_from's values: what the spec file says too
    out_dir = work / workdirs.OUT_DIR
    out_dir.mkdir(parents=True, exist_ok=True)
    spec_path = work / workdirs.SPEC_FILE
    spec_path.write_text(json.dumps(job.to_dict(), indent=2))
    # the job never sees the worker's credentials: its output reaches records, Flower, errors
    env = isolation.job_environment(os.environ, user)
    grant = run.grant
    env.update(
        protocol.job_environment(
            job_id=job.job_id,
            name=job.name,
            spec=spec_path,
            output_dir=out_dir,
            hyper=job.hyper,
            seed=job.seed,
            data_path=data_path,
            gpu_ids=[d.uuid or str(d.index) for d in run.gpus],
            cores=grant.cores if grant else (),
            gpu_memory_gib=grant.shared_gib if grant else 0.0,
            inputs=started.inputs,
        )
    )
    argv = list(job.command) if job.command else [sys.executable, "-m", "trainers.run"]
    return argv, env


def _run_process(
    task, ctx: HostContext, run: Run, argv: list[str], env: dict, pruning: trial.TrialWatch | None
) -> runner.RunOutcome:
    """Run the job's process, reporting its progress to the lease, Flower and `fleet logs`;
    ``pruning``: a trial's hook to its search."""
    job, work = run.job, run.work
    # Flower's Result cell says where it runs and on which GPUs
    hosts = tuple(m.host for m in run.seat.members) if run.seat else ()
    where = ran_on(ctx.hostname, hosts)  # a gang: every member's host
    where += f" GPU {','.join(str(d.index) for d in run.gpus)}" if run.gpus else ""
    flower = events.ProgressEvents(
        task, where, run.attempt, gpus=tuple(d.index for d in run.gpus), gang_hosts=hosts
    )
    history = MetricHistory(ctx.redis, job.job_id, run.number)
    with (
        open(work / workdirs.LOG_FILE, "w", encoding="utf-8") as log_file,
        checkpoint.syncing(ctx, job, run.token, work, env, uploads=run.lead) as ckpt,
        pbt.watching(ctx, run, ckpt) as member,  # a PBT search's member: its boundaries
    ):
        on_tick = _tick_loop(task, ctx, run, flower, history, pruning)
        with run.lease.fencing():  # cut off from Redis too long: it stops before its TTL lapses
            outcome = runner.run(
                argv,
                env=env,
                cwd=str(work),
                timeout_s=job.timeout_s,
                on_tick=on_tick,
                stop=ctx.shutdown,
                log=lambda line: (log_file.write(line + "\n"), run.output.append(line)),
                run_as=isolation.popen_user(ctx.job_user),
                python=ctx.job_user.python if ctx.job_user else None,
                exit_file=workdirs.exit_file(work),
                wake_fd=ctx.runs.wake_fd(job.job_id),
                on_metric=_each(history.record if run.lead else None, pruning, member),
                scope=workdirs.scope(work),  # a dead run's processes are found by its folder
                cgroup=ctx.settings.run_cgroups,
            )
        _flush_history(ctx, history)
        if pruning is not None:  # its last value reaches its search before its end is recorded
            pruning.close()
        ckpt.ended(outcome)  # handed back or failed: the checkpoint is synced once more on exit
    return outcome


def _each(*hooks):
    """One on_metric hook calling each of ``hooks`` that is set, in order."""
    live = [h for h in hooks if h is not None]
    return lambda report: [h(report) for h in live]


def _flush_history(ctx: HostContext, history: MetricHistory) -> None:
    """The run's last metric points reach Redis before its bundle is made from them."""
    try:
        retry_redis(history.send, what="send metric history", stop=ctx.shutdown)
    except redis.RedisError as e:
        log.warning("the last metric points of %s were not kept: %s", short_id(history.job_id), e)


def _tick_loop(
    task,
    ctx: HostContext,
    run: Run,
    flower: events.ProgressEvents,
    history: MetricHistory,
    pruning: trial.TrialWatch | None,
) -> ticks.TickLoop:
    """The lease's answer first (a run that lost its job reports nothing more), then progress
    reported (lease, metric history, Celery, Flower: skipped while Redis does not answer), then
    each other reason to stop (tasks.ticks): over its VRAM budget, pruned by its search, a
    hand-back."""
    lease = run.lease
    policies = [
        ticks.LeaseStop(lease),
        *([ticks.Heartbeat(lease)] if run.lead else []),  # the record's progress: rank 0's
        ticks.WhileRedisAnswers(ticks.EachTick(history.flush), lease),
    ]
    if run.lead:  # one task for a gang in Flower and the result backend: rank 0 reports for it
        policies += [
            ticks.WhileRedisAnswers(ticks.TaskProgress(task, run, ctx.hostname), lease),
            ticks.WhileRedisAnswers(ticks.FlowerProgress(flower), lease),
        ]
    watch = _vram_watch(run)
    if watch is not None:
        policies.append(ticks.VramBudget(watch, run))
    if pruning is not None:
        policies.append(pruning if run.seat is None else gang.PrunedTrial(ctx, run.job, pruning))
    if run.seat is not None:
        policies.append(
            ticks.WhileRedisAnswers(gang.GangWatch(ctx, run.job, run.seat, run.token), lease)
        )
    policies.append(ticks.HandBackAsked(ctx.runs, run.job.job_id))
    return ticks.TickLoop(policies)


def _vram_watch(run: Run) -> vramwatch.VramWatch | None:
    """A job sharing a GPU is held to its budget on it (NVML); whole GPUs are not watched."""
    if run.grant is None or run.grant.shared_gib <= 0 or not run.gpus:
        return None
    gpu = run.gpus[0]
    return vramwatch.VramWatch(
        vramwatch.nvml_usage(gpu.uuid), run.grant.shared_gib, f"GPU {gpu.index}", time.monotonic
    )


def _stopped(task, ctx: HostContext, run: Run, outcome, d: Decision, h) -> Ended:
    """The record already says what happened (cancelled, or another run owns the job):
    this run stops without a result of its own."""
    why = d.stop
    log.warning("stopped %s: %s", run.job.name, why.value)
    if (
        why is Stop.CANCELLED
        and retry_redis(
            lambda: ctx.records.states([run.job.job_id])[run.job.job_id],
            what="read state",
            stop=ctx.shutdown,
        )
        is JobState.CANCELLED
    ):
        events.revoked(task, "cancelled by operator")  # unless already requeued: the new run shows
    return Ended(Outcome.STOPPED, why.value)


def _cut_off_why(ctx: HostContext, run: Run) -> str:
    return (
        f"lost its lease: {ctx.hostname} could not reach Redis for {run.lease.cut_off_s:.0f} s "
        f"(lease TTL {ctx.records.lease_ttl_ms / 1000:g} s), so the run stopped before "
        "another host could take the job"
    )


def _gang_cut_off(task, ctx: HostContext, run: Run, outcome, d: Decision, h) -> Ended:
    """A gang member that stopped itself cut off from Redis: the gang goes back as a whole,
    its watch and lease see to it."""
    why = _cut_off_why(ctx, run)
    log.warning("stopped %s (%s): %s", run.job.name, short_id(run.job.job_id), why)
    return Ended(Outcome.STOPPED, why, end=RunEnd.LOST, detail=why)


def _cut_off(task, ctx: HostContext, run: Run, outcome, d: Decision, h) -> Ended:
    """The run stopped itself: its lease went unrenewed too long (tasks.lease). Once Redis
    answers again (waited for as long as it takes, unless the worker stops), its checkpoint
    is synced if the job is still its own, and the job goes back to its queue uncounted:
    a Redis outage is no fault of the job's. Taken over meanwhile (a partition), both writes
    are refused by its token. The end mark in `fleet logs` says why it stopped."""
    job = run.job
    why = _cut_off_why(ctx, run)
    log.warning("stopped %s (%s): %s; waiting for Redis", job.name, short_id(job.job_id), why)
    try:
        state = retry_redis(
            lambda: ctx.records.states([job.job_id])[job.job_id],
            what="read a cut-off run's job",
            stop=ctx.shutdown,
            backoff=UNTIL_REDIS_ANSWERS,
        )
        if state is JobState.RUNNING and job.checkpoint:
            checkpoint.CheckpointSync(ctx, job, run.token, run.work, {}).sync()
        handed = retry_redis(
            lambda: ctx.records.finish(
                job.job_id,
                run.token,
                JobState.QUEUED,
                count_attempt=False,
                last_error=why,
                **record_end(RunEnd.LOST, why),
            ),
            what="hand back a cut-off run",
            stop=ctx.shutdown,
        )
    except redis.RedisError as e:  # the worker is stopping: the lease hands the job on
        log.warning("%s: Redis still unreachable (%s); its lease hands the job on", job.name, e)
        return Ended(Outcome.STOPPED, why, end=RunEnd.LOST, detail=why)
    now = "went back to its queue" if handed else "was no longer this run's"
    log.warning("Redis answers again: %s %s", job.name, now)
    return Ended(Outcome.STOPPED, why, end=RunEnd.LOST, detail=why)


def _failed(task, ctx: HostContext, run: Run, outcome, d: Decision, h) -> Ended:
    """Record the failure: queued again while attempts remain (``d.again``), else failed."""
    job, attempt = run.job, run.attempt
    message, end, detail, reason, text = _failure(ctx, run, outcome, d.why)
    if not record_failure(ctx, run, message, end, reason, text, again=d.again):
        return _taken(task, ctx, run, outcome, h)
    if d.again:
        left = f"; queued again, {job.max_attempts - attempt} attempt(s) left"
        return Ended(
            Outcome.RETRYING,
            message + f"\n(retrying: attempt {attempt} of {job.max_attempts})",
            end=end,
            detail=detail + left,
        )
    return Ended(Outcome.FAILED, message, end=end, detail=detail)


def _failure(
    ctx: HostContext, run: Run, outcome: runner.RunOutcome | None, error: str
) -> tuple[str, RunEnd, str, str, str]:
    """A failure in words: the record's message, its end and the few words its end mark adds,
    its one line for `fleet status`, and the output kept; from its process's outcome, or the
    error that ended it without one."""
    job = run.job
    if outcome is None:
        message = f"job {job.name} ({short_id(job.job_id)}) failed on {ctx.hostname}: {error}"
        return (
            message,
            RunEnd.FAILED,
            error,
            failure_reason(RunEnd.FAILED, "failed", error.splitlines()[:1]),
            error,
        )
    why = (
        f"timed out after {job.timeout_s:g}s"
        if outcome.stopped is Stop.TIMEOUT
        else "was stopped: over its VRAM budget"
        if outcome.stopped is Stop.OVER_BUDGET
        else f"exited with status {outcome.returncode}"
    )
    tail = "\n".join(outcome.tail[-TAIL_LINES:])
    message = f"job {job.name} ({short_id(job.job_id)}) {why}; last output:\n{tail}"
    end, detail = failure_end(outcome.stopped, outcome.returncode, job.timeout_s)
    # over its budget, the watch's verdict (its output's last line) says why, not a traceback
    reason = failure_reason(
        end, detail, outcome.tail[-TAIL_LINES:], last=outcome.stopped is Stop.OVER_BUDGET
    )
    return message, end, detail, reason, tail


def record_failure(
    ctx: HostContext, run: Run, message: str, end: RunEnd, reason: str, text: str, *, again: bool
) -> bool:
    """The run's failure in its job's record: queued again (``again``) or failed; False when
    the job is no longer this run's."""
    return retry_redis(
        lambda: ctx.records.finish(
            run.job.job_id,
            run.token,
            JobState.QUEUED if again else JobState.FAILED,
            last_error=message[-4000:],
            **record_end(end, reason, text),
        ),
        what="record failure",
        stop=ctx.shutdown,
    )


# how each verdict is carried out (tasks.runend decides which)
CARRY_OUT = {
    Verdict.RELEASED: _released,
    Verdict.HANDED_BACK: _handed_back,
    Verdict.RANK_0_HANDS_BACK: _rank_0_hands_back,
    Verdict.STOPPED: _stopped,
    Verdict.CUT_OFF: _cut_off,
    Verdict.GANG_CUT_OFF: _gang_cut_off,
    Verdict.PRUNED: _pruned,
    Verdict.GANG_PRUNED: _ended_here(Outcome.STOPPED),
    Verdict.GANG_RERUN: _gang_rerun,
    Verdict.ENDED_ELSEWHERE: _ended_here(Outcome.STOPPED),
    Verdict.FAILED: _failed,
    Verdict.MEMBER_DONE: _member_done,
    Verdict.SUCCEEDED: _succeeded,
}
