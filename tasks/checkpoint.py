"""Checkpoint resume: a job's ``checkpoint`` dir outlives its run.

Before the job starts, the last synced checkpoint (named and hashed in the job record) is
restored into ``<work>/<checkpoint>`` and ``FLEET_CHECKPOINT_DIR`` names it. While the job
runs, the dir is packed and uploaded every ``FLEET_CHECKPOINT_EVERY_S`` if it changed, and
once more when the run is handed back (worker shutdown, a host policy) or fails. Uploads are content
addressed (``<prefix>/checkpoints/<job_id>/<sha256>.tar.zst``) and only the run owning the
job may record one (``state/lua/checkpoint.lua``), so a stale or torn upload is never what
a later run restores: it restores exactly the bytes whose sha256 the record holds.
"""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path

import redis

from artifacts import checkpoint as packer
from artifacts.bundle import sha256_file
from core.constants import CHECKPOINTS_PREFIX
from core.errors import FleetError
from core.ids import short_id
from manifest.schema import JobSpec
from tasks import isolation
from tasks.run import Stop
from trainers.protocol import ENV_CHECKPOINT_DIR

log = logging.getLogger("fleet.checkpoint")
ARCHIVE = "ckpt.tar.zst"  # packed in the run folder, beside the job's work dir
FIRST_POLL_S = 1.0  # until the store holds a checkpoint, look this often


def key_for(job_id: str, sha256: str) -> str:
    return f"{CHECKPOINTS_PREFIX}/{job_id}/{sha256}.tar.zst"


class NoCheckpoint:
    """A job that declares no checkpoint: nothing to restore or sync."""

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        pass

    def ended(self, outcome):
        return outcome


class CheckpointSync:
    """``with`` it around the job's run: restores on enter, syncs in the background, and
    syncs once more on exit when the run was handed back or failed (see ``ended``)."""

    def __init__(self, ctx, job: JobSpec, token: str, work: Path, env: dict, uploads: bool = True):
        self.ctx, self.job, self.token, self.uploads = ctx, job, token, uploads
        self.dir = Path(work) / job.checkpoint
        self.archive = Path(work).parent / ARCHIVE
        self.every_s = float(ctx.app.conf.fleet_checkpoint_every_s)
        self.env, self.outcome = env, None
        # the step the dir is known to hold at least (a PBT member's latest boundary heard,
        # tasks.pbt), recorded with each sync; read before the dir is
        self.step: int | None = None
        self._value: dict | None = None  # the record this run made or restored
        self._recorded_step: int | None = None
        self._lock = threading.Lock()  # the background loop and a PBT boundary's sync
        self._synced: tuple = ()
        self._stored = False  # the store holds a checkpoint of this job (restored or synced)
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._loop, name=f"ckpt-{short_id(job.job_id)}", daemon=True
        )

    def __enter__(self) -> CheckpointSync:
        self.dir.mkdir(parents=True, exist_ok=True)
        self.restore()
        # FLEET_JOB_USER writes it
        isolation.hand_over(self.dir, getattr(self.ctx, "job_user", None))
        self._synced = packer.fingerprint(self.dir)
        self.env[ENV_CHECKPOINT_DIR] = str(self.dir)
        if self.uploads:
            self._thread.start()
        return self

    def ended(self, outcome):
        """Note how the run ended (a ``runner.RunOutcome``); returns it."""
        self.outcome = outcome
        return outcome

    def __exit__(self, *exc) -> None:
        if not self.uploads:  # restored only (a gang's rank other than 0)
            return
        self._stop.set()
        self._thread.join()
        o = self.outcome
        # handed back at shutdown, or failed (and maybe retried): the next run starts from here.
        # Not when cancelled or lost: the job is not this run's to checkpoint any more; nor when
        # exploited: it goes on from the donor's checkpoint, put in place of its own (tasks.pbt).
        if o is not None and (
            (
                o.stopped is not None
                and o.stopped is not Stop.EXPLOITED
                and (o.stopped.hands_back or o.stopped is Stop.TIMEOUT)
            )
            or (o.stopped is None and o.returncode != 0)
        ):
            self.sync()

    # --- restore -----------------------------------------------------------------
    def restore(self) -> None:
        try:
            last = self.ctx.records.checkpoint(self.job.job_id)
        except (redis.RedisError, ValueError) as e:
            log.warning(
                "cannot read %s's checkpoint record (%s); starting it fresh", self.job.name, e
            )
            return
        if not last:
            return
        try:
            self.ctx.open_store().get_file(last["key"], self.archive)
            if (actual := sha256_file(self.archive)) != last["sha256"]:
                raise FleetError(
                    f"{last['key']}: sha256 {actual}, the record says {last['sha256']}"
                )
            count = packer.unpack(self.archive, self.dir)
        except (FleetError, OSError, KeyError) as e:
            log.error("not restoring %s's checkpoint (%s); starting it fresh", self.job.name, e)
            return
        finally:
            self.archive.unlink(missing_ok=True)
        self._stored = True
        self._value, self._recorded_step = last, last.get("step")
        log.warning(
            "restored %s's checkpoint: %d file(s) synced at %s",
            self.job.name,
            count,
            time.strftime("%H:%M:%S", time.localtime(last.get("synced_at", 0))),
        )

    # --- sync ----------------------------------------------------------------------
    def _loop(self) -> None:
        # the first checkpoint goes up as soon as the job writes it, later ones every every_s
        while not self._stop.wait(
            self.every_s if self._stored else min(self.every_s, FIRST_POLL_S)
        ):
            self._stored = self.sync() or self._stored

    def sync(self) -> bool:
        """Upload the dir if it changed since the last sync; True when a new one is recorded.
        Unchanged, but with a greater step heard since: the same upload recorded at that step."""
        with self._lock:
            step = self.step
            seen = packer.fingerprint(self.dir)
            if seen and seen == self._synced and self._value and self._later(step):
                try:
                    return self._record(dict(self._value, step=step), None)
                except redis.RedisError as e:  # the next sync tries again
                    log.warning("could not record %s's checkpoint: %s", self.job.name, e)
                    return False
            if not seen or seen == self._synced:
                return False
            return self._upload(seen, step)

    @property
    def recorded_step(self) -> int | None:
        """The step the job's checkpoint record holds, as this run made or restored it."""
        return self._recorded_step

    def _later(self, step: int | None) -> bool:
        return step is not None and (self._recorded_step is None or step > self._recorded_step)

    def _record(self, value: dict, store) -> bool:
        """Make ``value`` the job's checkpoint (only while this run owns the job); the upload
        it replaced is deleted from ``store`` (None: the same upload, nothing to delete)."""
        recorded, previous = self.ctx.records.record_checkpoint(self.job.job_id, self.token, value)
        if not recorded:
            log.warning(
                "%s's checkpoint not recorded: this run no longer owns the job", self.job.name
            )
            return False
        self._value, self._recorded_step = value, value.get("step")
        if store is not None and previous and previous.get("key") != value["key"]:
            store.delete_file(previous["key"])
        return True

    def _upload(self, seen: tuple, step: int | None) -> bool:
        try:
            packed = packer.pack(
                self.dir, self.archive, {"job_id": self.job.job_id, "name": self.job.name}
            )
            if packer.fingerprint(self.dir) != seen:  # written while we packed: a torn copy
                log.info("%s's checkpoint changed while packing; next time", self.job.name)
                return False
            store = self.ctx.open_store()
            key = key_for(self.job.job_id, packed.sha256)
            store.put_file(key, packed.path)
            value = {
                "key": key,
                "sha256": packed.sha256,
                "size": packed.size,
                "synced_at": time.time(),
                "files": len(seen),
                **({"step": step} if step is not None else {}),
            }
            if not self._record(value, store):
                return False
            self._synced = seen
            log.info(
                "synced %s's checkpoint: %d bytes (%s)",
                self.job.name,
                packed.size,
                short_id(packed.sha256),
            )
            return True
        except (FleetError, OSError, redis.RedisError) as e:  # the next tick tries again
            log.warning("could not sync %s's checkpoint: %s", self.job.name, e)
            return False
        finally:
            self.archive.unlink(missing_ok=True)


def syncing(ctx, job: JobSpec, token: str, work: Path, env: dict, uploads: bool = True):
    """The checkpoint context for one run; ``env`` gets FLEET_CHECKPOINT_DIR on enter.
    ``uploads``: False for a run that restores the checkpoint but never syncs it (a gang's
    rank other than 0)."""
    if not job.checkpoint:
        return NoCheckpoint()
    return CheckpointSync(ctx, job, token, work, env, uploads)


def drop(ctx, job: JobSpec) -> None:
    """The job succeeded: its checkpoint is no longer needed (record first, then the store)."""
    if not job.checkpoint:
        return
    try:
        old = ctx.records.drop_checkpoint(job.job_id)
        if old:
            ctx.open_store().delete_file(old["key"])
    except (FleetError, OSError, redis.RedisError, ValueError) as e:
        log.warning("could not delete %s's checkpoint: %s", job.name, e)
