"""A finished run's output, bundled, kept on disk, uploaded and recorded: exactly once.

The bundle is written under ``FLEET_WORK_DIR/pending/<job_id>/`` before the upload starts,
and removed only once the record says succeeded. A store outage is waited out (training is
never repeated for it); a worker stopped meanwhile keeps the bundle, and its next start
stores and records it (``upload_kept``) before taking new work.

The store is fenced by the record: the bundle is staged under this run's token
(``Store.stage_bundle``), and becomes the job's listed artifact (``Store.promote``) only
once finish.lua recorded it for this run. A run that lost its job meanwhile (another host
took it over during a partition) discards what it staged and reports no success.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import shutil
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

from artifacts import bundle as bundler
from artifacts.stores import StoredArtifact, atomic_write
from core.errors import DigestMismatch, StoreError
from core.ids import short_id
from manifest.schema import JobSpec
from state import history
from state.jobrecord import JobState, RunEnd, record_end
from tasks import workdirs
from tasks.host import HostContext
from tasks.retry import UPLOAD_BACKOFF, retry, retry_redis
from tasks.run import Outcome, Run, RunStopped
from tasks.runner import RunOutcome
from trainers.protocol import METRICS_FILE, clip_metrics

log = logging.getLogger("fleet.upload")
PENDING_DIR = "pending"
BUNDLE_FILE, META_FILE = "bundle.tar.zst", "meta.json"
RANK_LOGS = "fleet-log-rank*.txt"  # a gang's other ranks' output, written by its rank 0
LOCK_FILE = ".lock"  # flock'ed by the process working on a kept-bundle folder (held)
SET_ASIDE = ".unreadable"  # suffix of kept-bundle folders upload_kept could not use


def files(job: JobSpec, work: Path) -> list[tuple[str, Path]]:
    """What goes in a job's bundle: its artifacts (a command job) or its output dir."""
    if job.command:
        found = bundler.collect(work, list(job.artifacts) or [f"{workdirs.OUT_DIR}/**/*"])
    else:
        found = bundler.collect(work / workdirs.OUT_DIR, [])
    # the job's output log and metric history go in once, even when an artifacts glob also
    # matches them; a job's own file of either name gives way to fleet's
    ours = (
        [workdirs.LOG_FILE]
        + sorted(p.name for p in work.glob(RANK_LOGS))  # a gang's other ranks (tasks.gang)
        + ([workdirs.HISTORY_FILE] if (work / workdirs.HISTORY_FILE).exists() else [])
    )
    return [f for f in found if f[0] not in ours] + [(name, work / name) for name in ours]


def store_result(
    ctx: HostContext, run: Run, outcome: RunOutcome, state: JobState = JobState.SUCCEEDED
) -> dict:
    """Bundle, upload and record a run that trained (or a trial its search pruned, ``state``
    PRUNED: its outputs are kept alike); the task's result."""
    job, ended = run.job, time.time()
    metrics = _metrics(run.work, outcome)
    write_history(ctx.redis, job.job_id, run.work, ctx.shutdown)
    meta = {
        "job": job.to_dict(),
        "job_id": job.job_id,
        "name": job.name,
        "worker": ctx.hostname,
        "capability": ctx.capability.to_dict(),
        "versions": ctx.capability.versions,
        "gpu": None if run.gpu is None else {"index": run.gpu.index, "name": run.gpu.name},
        "gpus": [{"index": d.index, "name": d.name} for d in run.gpus],
        "started_at": _iso(run.started),
        "ended_at": _iso(ended),
        "elapsed_s": round(outcome.elapsed_s, 3),
        "attempt": run.attempt,
        "metrics": metrics,
        **({"bad_metric_lines": outcome.bad_lines} if outcome.bad_lines else {}),
    }
    pending = ctx.work_root / PENDING_DIR / job.job_id
    with held(pending, wait=True):
        return _keep_and_store(ctx, run, outcome, state, meta, pending)


def _keep_and_store(
    ctx: HostContext, run: Run, outcome: RunOutcome, state: JobState, meta: dict, pending: Path
) -> dict:
    """Bundle into ``pending`` (held), upload, record, then let the kept bundle go."""
    job, metrics = run.job, meta["metrics"]
    result = bundler.bundle(files(job, run.work), meta, pending / BUNDLE_FILE)
    meta = {**meta, "sha256": result.sha256, "size": result.size, "files": result.files}
    atomic_write(pending / META_FILE, json.dumps(meta).encode())
    try:
        stored = _upload(ctx, run, result, meta)
    except RunStopped as e:
        if e.outcome is Outcome.STOPPED:  # not this run's job any more: its bundle is not ours
            shutil.rmtree(pending, ignore_errors=True)
        raise
    artifact = {"uri": stored.uri, "sha256": stored.sha256, "size": stored.size}
    # the run's last progress, not its last tick's (a tick before the final epochs' lines)
    bad = {"bad_metric_lines": outcome.bad_lines} if outcome.bad_lines else {}
    final = {
        "elapsed_s": round(outcome.elapsed_s, 1),
        "tail": outcome.tail[-10:],
        "metrics": metrics,
        **bad,
    }
    # The kept bundle goes only once the success is recorded: if Redis stays down past every
    # retry, the next start of this worker records it (upload_kept) instead of a re-train.
    end = (
        record_end(RunEnd.PRUNED, "by its search's pruner")
        if state is JobState.PRUNED
        else record_end(RunEnd.SUCCEEDED, "")
    )
    # A lost reply is no loss of the job: finish.lua knows this run's own finish.
    recorded = retry_redis(
        lambda: ctx.records.finish(
            job.job_id,
            run.token,
            state,
            artifact=artifact,
            result={"metrics": metrics, **bad},
            last_error="",
            progress=final,
            **end,
        ),
        what="record success",
        stop=ctx.shutdown,
    )
    shutil.rmtree(pending, ignore_errors=True)
    if not recorded:
        _settle(ctx, run.token, job.kind, stored.sha256, keep=False)
        log.warning(
            "job %s was taken over or cancelled while uploading; its staged bundle is discarded",
            job.name,
        )
        raise RunStopped(
            Outcome.STOPPED, "taken over or cancelled while uploading; its bundle was discarded"
        )
    _settle(ctx, run.token, job.kind, stored.sha256, keep=True)
    return {
        "job_id": job.job_id,
        "name": job.name,
        "artifact_uri": stored.uri,
        "sha256": stored.sha256,
        "size": stored.size,
        "metrics": metrics,
        "worker": ctx.hostname,
        "attempt": run.attempt,
    }


def _metrics(work: Path, outcome: RunOutcome) -> dict:
    """The metric lines seen, updated by what the job wrote to metrics.json, within bounds."""
    metrics = dict(outcome.metrics)
    path = work / workdirs.OUT_DIR / METRICS_FILE
    try:
        written = json.loads(path.read_text()) if path.exists() else {}
        metrics.update(written if isinstance(written, dict) else {"metrics_json": written})
    except (OSError, ValueError, RecursionError) as e:
        log.warning("ignoring unreadable %s: %s", path, e)
    return clip_metrics(metrics)  # the record's bounds: one line must not fill Redis


def write_history(client, job_id: str, work: Path, stop: threading.Event) -> Path:
    """The job's metric history, its every run folded by step, as the bundle's metrics.jsonl."""
    points = retry_redis(
        lambda: history.read(client, job_id), what="read metric history", stop=stop
    )
    path = work / workdirs.HISTORY_FILE
    atomic_write(path, history.jsonl(points))
    return path


def _upload(ctx: HostContext, run: Run, result: bundler.BundleResult, meta: dict) -> StoredArtifact:
    """Upload through any store outage; stopped when the job is no longer this run's."""
    store = ctx.open_store()

    def attempt() -> StoredArtifact:
        # cancelled, or another run owns the job: its artifact is not ours to store
        if run.lease.reason:
            raise RunStopped(Outcome.STOPPED, f"{run.lease.reason.value} while uploading")
        return store.stage_bundle(run.token, run.job.kind, result.path, result.sha256, meta)

    try:
        return retry(
            attempt,
            on=StoreError,
            backoff=UPLOAD_BACKOFF,
            stop=ctx.shutdown,
            what=f"upload of {run.job.name} (bundle kept at {result.path})",
        )
    except StoreError as e:  # only a shutdown ends the retries
        raise RunStopped(
            Outcome.FAILED,
            f"worker stopped before {run.job.name} could be uploaded; bundle kept at {result.path}",
        ) from e


def _settle(ctx: HostContext, token: str, kind: str, sha256: str, *, keep: bool) -> None:
    """Promote (``keep``) or discard what run ``token`` staged, through a store outage; a
    worker stopped first leaves it to the sweep (tasks.strays), which reads the record."""
    store = ctx.open_store()
    step = store.promote if keep else store.discard
    try:
        retry(
            lambda: step(token, kind, sha256),
            on=StoreError,
            backoff=UPLOAD_BACKOFF,
            stop=ctx.shutdown,
            what=f"{step.__name__} of staged bundle {short_id(sha256)}",
        )
    except StoreError as e:
        log.warning(
            "staged bundle %s of run %s not %sd (%s); the sweep of staged bundles does it",
            short_id(sha256),
            short_id(token),
            step.__name__,
            e,
        )


@contextmanager
def held(folder: Path, wait: bool) -> Iterator[bool]:
    """Hold a kept-bundle folder (made if missing) while bundling, uploading or removing it:
    a run and a start's ``upload_kept``, or a dead worker's watchman (tasks.watchman) and the
    worker started again, never work on one folder at once. Yields False, holding nothing,
    where ``wait`` is False and another process holds it (the kernel drops a dead one's lock)."""
    while True:
        folder.mkdir(parents=True, exist_ok=True)
        fd = os.open(folder / LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX if wait else fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            yield False
            return
        if _same_file(fd, folder / LOCK_FILE):
            break
        os.close(fd)  # its holder removed the folder meanwhile: hold the new one
    try:
        yield True
    finally:
        os.close(fd)


def _same_file(fd: int, path: Path) -> bool:
    try:
        return os.stat(path).st_ino == os.fstat(fd).st_ino
    except FileNotFoundError:
        return False


def upload_kept(ctx: HostContext) -> None:
    """Upload bundles kept on disk by an earlier run of this worker, before new work; one
    another live process is working on is left to it."""
    root = ctx.work_root / PENDING_DIR
    for folder in sorted(root.glob("*")) if root.exists() else []:
        if not folder.name.endswith(SET_ASIDE):
            with held(folder, wait=False) as mine:
                if mine:
                    _upload_kept_one(ctx, folder)


def _upload_kept_one(ctx: HostContext, folder: Path) -> None:
    meta_path, bundle_path = folder / META_FILE, folder / BUNDLE_FILE
    if not (meta_path.exists() and bundle_path.exists()):
        shutil.rmtree(folder, ignore_errors=True)  # bundling never finished: nothing to save
        return
    try:
        meta = json.loads(meta_path.read_text())
        job_id, sha256 = meta["job_id"], meta["sha256"]
        state = retry_redis(
            lambda: ctx.records.states([job_id])[job_id], what="read kept job", stop=ctx.shutdown
        )
        bundler.verify_bundle(bundle_path, sha256)
    except (ValueError, KeyError, TypeError, DigestMismatch) as e:
        log.error("kept bundle %s is unreadable (%s); moved aside, not uploaded", folder, e)
        folder.rename(folder.with_name(f"{folder.name}.{time.time_ns()}{SET_ASIDE}"))
        return
    if state in (JobState.SUCCEEDED, JobState.CANCELLED, JobState.PRUNED):
        log.warning(
            "dropping kept bundle of %s: the job is already %s", meta.get("name"), state.value
        )
        shutil.rmtree(folder, ignore_errors=True)
        return
    token = uuid.uuid4().hex  # its run's token is not kept: staged under one of its own
    try:
        kind = (meta.get("job") or {}).get("model") or "command"
        stored = ctx.open_store().stage_bundle(token, kind, bundle_path, sha256, meta)
    except StoreError as e:
        log.warning(
            "kept bundle %s still cannot be uploaded (%s); will retry at next start", folder, e
        )
        return
    artifact = {"uri": stored.uri, "sha256": stored.sha256, "size": stored.size}
    answer = retry_redis(
        lambda: ctx.records.adopt(job_id, artifact, {"metrics": meta.get("metrics", {})}),
        what="adopt",
        stop=ctx.shutdown,
    )
    _settle(ctx, token, kind, sha256, keep=answer == "ok")
    if answer == "ok":
        log.warning("uploaded kept bundle of %s: %s", meta.get("name"), stored.uri)
    else:  # recorded by another run meanwhile, cancelled, or gone: not this bundle's job
        log.warning("dropped kept bundle of %s: the job is %s", meta.get("name"), answer)
    shutil.rmtree(folder, ignore_errors=True)


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).isoformat()
