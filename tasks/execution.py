"""Run one delivered job, exactly once: claim, run, bundle, upload, record.

Thin glue over plain modules: ``state.records`` decides who runs, ``tasks.runner`` runs
the process group, ``artifacts`` bundles and stores. Failures map to one of: drop the
duplicate, release back to the queue (shutdown), retry (max_attempts), or fail.
"""
from __future__ import annotations

import json
import logging
import os
import shutil
import sys
import time
import uuid
from datetime import datetime, timezone
from pathlib import Path
from typing import NoReturn

import redis

from artifacts import bundle as bundler
from artifacts.data import fetch
from artifacts.stores import atomic_write, open_store
from celery.exceptions import Ignore, Reject

from state import deadletter
from core.constants import DATA_CACHE_DIR, TAIL_LINES
from core.errors import DigestMismatch, StoreError, TrainingFailed
from state.records import JobState
from manifest.schema import JobSpec
from tasks import events, isolation, runner
from tasks import checkpoint, trained, workdirs
from tasks.joblog import JobLog
from tasks.lease import LeaseKeeper
from tasks.worker import HostContext, context

log = logging.getLogger("fleet.execution")
UPLOAD_BACKOFF_S = (1, 2, 5, 10, 30, 60)
# Task states (Flower, AsyncResult) of a delivery that ended without a result of its own.
# A custom name: Celery's RETRY is an exception state whose meta must be an error. A cancelled
# delivery ends REVOKED (tasks.events).
REQUEUED_STATE = "REQUEUED"
SET_ASIDE = ".unreadable"   # suffix of kept-bundle folders upload_kept could not use


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t, timezone.utc).isoformat()


def _wants_gpu(job: JobSpec, queue: str, ctx: HostContext) -> bool:
    tier = next((t for t in ctx.config.tiers if queue == t.name or queue.startswith(t.name + ".")), None)
    return bool(ctx.capability.cuda_devices) and (job.needs.require_cuda or
                                                  (job.prefer_cuda and tier is not None and tier.floor.require_cuda))


def _argv_env(job: JobSpec, workdir: Path, data_path: Path | None, gpu_id: str | None,
              user: isolation.JobUser | None = None) -> tuple[list[str], dict]:
    out_dir = workdir / "out"
    out_dir.mkdir(parents=True, exist_ok=True)
    spec_path = workdir / "job.json"
    spec_path.write_text(json.dumps(job.to_dict(), indent=2))
    # the job never sees the worker's credentials: its output reaches records, Flower, errors
    env = isolation.job_environment(os.environ, user)
    env.update(FLEET_JOB_ID=job.job_id, FLEET_JOB_NAME=job.name, FLEET_JOB_SPEC=str(spec_path),
               FLEET_OUTPUT_DIR=str(out_dir), FLEET_HYPER=json.dumps(job.hyper), FLEET_SEED=str(job.seed),
               FLEET_DATA_PATH=str(data_path or ""), FLEET_DEVICE="cuda" if gpu_id else "cpu",
               CUDA_VISIBLE_DEVICES=gpu_id or "", PYTHONUNBUFFERED="1")
    argv = list(job.command) if job.command else [sys.executable, "-m", "trainers.run"]
    return argv, env


def _progress_meta(job: JobSpec, ctx: HostContext, snap: dict) -> dict:
    return {"job_id": job.job_id, "name": job.name, "worker": ctx.hostname, **snap}


def execute(task, job: JobSpec) -> dict:
    ctx = context()
    if ctx.shutdown.is_set():   # delivered while the worker is stopping: leave it to the next one
        raise Reject("worker shutting down", requeue=True)
    queue = (task.request.delivery_info or {}).get("routing_key") or ""
    token = uuid.uuid4().hex
    adopt = bool(ctx.app.conf.get("fleet_adopt_unpublished"))
    claim = _redis_retry(ctx, lambda: ctx.records.claim(job.job_id, ctx.hostname, token, job.to_dict(), queue,
                                                        adopt=adopt), "claim")
    if claim.reason == "no record":
        _refuse_unpublished(task, ctx, job, queue)
    if not claim.run:
        # a duplicate (redelivery, fallback copy, second publish): ack it, and leave the
        # task's stored result to the run that counts
        log.info("dropping delivery of %s (%s): %s", job.name, job.job_id[:12], claim.reason)
        if claim.reason == "cancelled":
            events.revoked(task, "cancelled while queued")
        raise Ignore()
    if claim.attempts > 1:
        events.restarted(task, claim.attempts)
    gpu = None
    workdir = workdirs.create(ctx.work_root, job.job_id, trained.run_info(job, token, claim.attempts, ctx.hostname))
    try:
        with LeaseKeeper(ctx.records, job.job_id, token) as lease:
            if _wants_gpu(job, queue, ctx):
                gpu = ctx.gpus.acquire(job.needs.min_vram_gib, ctx.shutdown)
                if gpu is None:
                    _release(task, ctx, job, token, "shutdown before a GPU was free")
                lease.report(gpu=f"{gpu.index}:{gpu.name}")
            try:
                return _run(task, ctx, job, token, claim.attempts, lease, workdir, gpu)
            except (TrainingFailed, Ignore, redis.RedisError):
                # a RedisError here outlived every retry: the record cannot be written, so the
                # lease (and a kept bundle, if training finished) decides what happens next
                raise
            except Exception as e:  # anything unforeseen ends the run, recorded, not left to a lease
                _failed(ctx, job, token, claim.attempts, None, error=f"{type(e).__name__}: {e}")
    finally:
        if gpu is not None:
            ctx.gpus.release(gpu)
        workdirs.remove(workdir)


def _refuse_unpublished(task, ctx: HostContext, job: JobSpec, queue: str) -> NoReturn:
    """A message no `fleet publish` recorded (e.g. apply_async): set aside, not run."""
    why = (f"no record for job {job.job_id}: not published by fleet (set FLEET_ADOPT_UNPUBLISHED=1 "
           "on workers to run such messages)")
    log.error("refusing delivery of %s (%s): %s", job.name, job.job_id[:12], why)
    raw = json.dumps({"id": task.request.id, "task": task.name, "args": task.request.args,
                      "delivery_info": task.request.delivery_info})
    _redis_retry(ctx, lambda: deadletter.set_aside(ctx.redis, deadletter.entry(raw, why, queue, worker=ctx.hostname)),
                 "set aside")
    raise Ignore()


def _release(task, ctx: HostContext, job: JobSpec, token: str, why: str) -> NoReturn:
    _redis_retry(ctx, lambda: ctx.records.finish(job.job_id, token, JobState.QUEUED, count_attempt=False,
                                                 last_error=f"released: {why}"), "release")
    log.warning("released %s back to its queue: %s", job.name, why)
    # the job will run again under this task id: no SUCCESS for this delivery, and no
    # PROGRESS left behind either
    _final_state(task, REQUEUED_STATE, job, why)
    events.requeued(task, why)
    raise Ignore()


def _final_state(task, state: str, job: JobSpec, why: str) -> None:
    try:
        task.update_state(state=state, meta={"job_id": job.job_id, "name": job.name, "why": why})
    except Exception as e:  # the result backend is down: the job record is what counts
        log.debug("result state update failed: %s", e)


def _run(task, ctx, job, token, attempts, lease, workdir: Path, gpu) -> dict:
    started = time.time()
    data_path = fetch(job.data, ctx.work_root / DATA_CACHE_DIR, into=workdir) if job.data else None
    argv, env = _argv_env(job, workdir, data_path, ctx.gpus.visible_id(gpu) if gpu else None, ctx.job_user)
    isolation.hand_over(workdir, ctx.job_user)   # the data pin lives in the cache, not in workdir
    log_path = workdir / "fleet-log.txt"
    flower = events.ProgressEvents(task, ctx.hostname, attempts)
    with open(log_path, "w", encoding="utf-8") as log_file, checkpoint.syncing(ctx, job, token, workdir, env) as ckpt, \
            JobLog(ctx.redis, job.job_id, run=attempts, worker=ctx.hostname) as joblog:
        def on_tick(progress: runner.Progress) -> str | None:
            snap = progress.snapshot()
            lease.report(progress=snap)
            try:
                task.update_state(state="PROGRESS", meta=_progress_meta(job, ctx, snap))
            except Exception as e:  # the result backend is down: progress is best effort
                log.debug("progress update failed: %s", e)
            flower.tick(snap)
            return lease.reason

        outcome = runner.run(argv, env=env, cwd=str(workdir), timeout_s=job.timeout_s, on_tick=on_tick,
                             stop=ctx.shutdown, log=lambda line: (log_file.write(line + "\n"), joblog.append(line)),
                             run_as=isolation.popen_user(ctx.job_user),
                             python=ctx.job_user.python if ctx.job_user else None,
                             exit_file=workdirs.exit_file(workdir))
        ckpt.ended(outcome)   # handed back or failed: the checkpoint is synced once more on exit
    if outcome.stopped == "shutdown":
        _release(task, ctx, job, token, "worker shutting down")
    if outcome.stopped in ("cancelled", "lost", "queued", "failed", "succeeded"):
        # the record already says what happened (cancelled, or another run owns the job):
        # this run stops without a result of its own
        log.warning("stopped %s: %s", job.name, outcome.stopped)
        if outcome.stopped == "cancelled" and _redis_retry(
                ctx, lambda: ctx.records.states([job.job_id])[job.job_id], "read state") is JobState.CANCELLED:
            events.revoked(task, "cancelled by operator")  # unless already requeued: the new run shows
        raise Ignore()
    if outcome.stopped == "timeout" or outcome.returncode != 0:
        return _failed(ctx, job, token, attempts, outcome)
    trained.mark(ctx, job, token, workdir)
    result = _store(task, ctx, job, token, attempts, lease, workdir, gpu, started, outcome)
    checkpoint.drop(ctx, job)
    return result


def _failed(ctx, job, token, attempts, outcome, error: str | None = None) -> dict:
    if outcome is None:
        message = f"job {job.name} ({job.job_id[:12]}) failed on {ctx.hostname}: {error}"
    else:
        why = (f"timed out after {job.timeout_s:g}s" if outcome.stopped == "timeout"
               else f"exited with status {outcome.returncode}")
        tail = "\n".join(outcome.tail[-TAIL_LINES:])
        message = f"job {job.name} ({job.job_id[:12]}) {why}; last output:\n{tail}"
    retry = job.max_attempts is not None and attempts < job.max_attempts
    _redis_retry(ctx, lambda: ctx.records.finish(job.job_id, token, JobState.QUEUED if retry else JobState.FAILED,
                                                 last_error=message[-4000:]), "record failure")
    raise TrainingFailed(message + ("\n(retrying: attempt %d of %d)" % (attempts, job.max_attempts) if retry else ""))


def _files(job: JobSpec, workdir: Path) -> list[tuple[str, Path]]:
    if job.command:
        files = bundler.collect(workdir, list(job.artifacts) or ["out/**/*"])
    else:
        files = bundler.collect(workdir / "out", [])
    # the job's output log goes in once, even when an artifacts glob also matches it
    return [f for f in files if f[0] != "fleet-log.txt"] + [("fleet-log.txt", workdir / "fleet-log.txt")]


def _store(task, ctx, job, token, attempts, lease, workdir, gpu, started, outcome) -> dict:
    ended = time.time()
    metrics = dict(outcome.metrics)
    metrics_file = workdir / "out" / "metrics.json"
    try:
        written = json.loads(metrics_file.read_text()) if metrics_file.exists() else {}
        metrics.update(written if isinstance(written, dict) else {"metrics_json": written})
    except (OSError, ValueError) as e:
        log.warning("ignoring unreadable %s: %s", metrics_file, e)
    meta = {"job": job.to_dict(), "job_id": job.job_id, "name": job.name, "worker": ctx.hostname,
            "capability": ctx.capability.to_dict(), "versions": ctx.capability.versions,
            "gpu": None if gpu is None else {"index": gpu.index, "name": gpu.name},
            "started_at": _iso(started), "ended_at": _iso(ended), "elapsed_s": round(outcome.elapsed_s, 3),
            "attempt": attempts, "metrics": metrics}
    pending = ctx.work_root / "pending" / job.job_id
    pending.mkdir(parents=True, exist_ok=True)
    result = bundler.bundle(_files(job, workdir), meta, pending / "bundle.tar.zst")
    meta = {**meta, "sha256": result.sha256, "size": result.size, "files": result.files}
    atomic_write(pending / "meta.json", json.dumps(meta).encode())
    try:
        stored = _upload(ctx, job, lease, result, meta)
    except Ignore:
        shutil.rmtree(pending, ignore_errors=True)
        raise
    artifact = {"uri": stored.uri, "sha256": stored.sha256, "size": stored.size}
    # The kept bundle goes only once the success is recorded: if Redis stays down past every
    # retry, the next start of this worker records it (upload_kept) instead of a re-train.
    recorded = _redis_retry(ctx, lambda: ctx.records.finish(job.job_id, token, JobState.SUCCEEDED, artifact=artifact,
                                                            result={"metrics": metrics}, last_error=""),
                            "record success")
    shutil.rmtree(pending, ignore_errors=True)
    if not recorded:
        log.warning("job %s was taken over while uploading; its artifact is stored anyway", job.name)
    return {"job_id": job.job_id, "name": job.name, "artifact_uri": stored.uri, "sha256": stored.sha256,
            "size": stored.size, "metrics": metrics, "worker": ctx.hostname, "attempt": attempts}


def _redis_retry(ctx, op, what: str, tries: int = 60):
    """A record write that must not be lost to a broker blip: retry with backoff."""
    for i in range(tries):
        try:
            return op()
        except redis.RedisError as e:
            log.warning("Redis unavailable to %s (%s); retrying", what, e)
            time.sleep(min(2 ** i * 0.2, 5))
    return op()


def upload_kept(ctx: HostContext) -> None:
    """Upload bundles kept on disk by an earlier run of this worker, before new work."""
    root = ctx.work_root / "pending"
    for folder in sorted(root.glob("*")) if root.exists() else []:
        if folder.name.endswith(SET_ASIDE):
            continue
        meta_path, bundle_path = folder / "meta.json", folder / "bundle.tar.zst"
        if not (meta_path.exists() and bundle_path.exists()):
            shutil.rmtree(folder, ignore_errors=True)  # bundling never finished: nothing to save
            continue
        try:
            meta = json.loads(meta_path.read_text())
            job_id, sha256 = meta["job_id"], meta["sha256"]
            state = _redis_retry(ctx, lambda: ctx.records.states([job_id])[job_id], "read kept job")
            bundler.verify_bundle(bundle_path, sha256)
        except (ValueError, KeyError, TypeError, DigestMismatch) as e:
            log.error("kept bundle %s is unreadable (%s); moved aside, not uploaded", folder, e)
            folder.rename(folder.with_name(f"{folder.name}.{time.time_ns()}{SET_ASIDE}"))
            continue
        if state in (JobState.SUCCEEDED, JobState.CANCELLED):
            log.warning("dropping kept bundle of %s: the job is already %s", meta.get("name"), state.value)
            shutil.rmtree(folder, ignore_errors=True)
            continue
        try:
            kind = (meta.get("job") or {}).get("model") or "command"
            stored = open_store().put_bundle(kind, bundle_path, sha256, meta)
        except StoreError as e:
            log.warning("kept bundle %s still cannot be uploaded (%s); will retry at next start", folder, e)
            continue
        artifact = {"uri": stored.uri, "sha256": stored.sha256, "size": stored.size}
        outcome = _redis_retry(ctx, lambda: ctx.records.adopt(job_id, artifact,
                                                              {"metrics": meta.get("metrics", {})}), "adopt")
        log.warning("uploaded kept bundle of %s: %s (%s)", meta.get("name"), stored.uri, outcome)
        shutil.rmtree(folder, ignore_errors=True)


def _upload(ctx, job, lease, result, meta):
    """Upload with backoff; training is never repeated because the store was down."""
    store = open_store()
    for i in range(10 ** 6):
        if lease.reason:   # cancelled, or another run owns the job: its artifact is not ours to store
            raise Ignore()
        try:
            return store.put_bundle(job.kind, result.path, result.sha256, meta)
        except StoreError as e:
            wait = UPLOAD_BACKOFF_S[min(i, len(UPLOAD_BACKOFF_S) - 1)]
            log.warning("store unavailable for %s (%s); bundle kept at %s, retrying in %ss",
                        job.name, e, result.path, wait)
            if ctx.shutdown.wait(wait):
                raise TrainingFailed(f"worker stopped before {job.name} could be uploaded; "
                                     f"bundle kept at {result.path}") from e
    raise AssertionError("unreachable")
