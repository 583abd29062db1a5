"""Durable per-job records in Redis, and the atomic transitions between states.

Every transition is one Lua script, so two workers racing for one job (a Redis
redelivery, a duplicate publish, the prefer_cuda copy) see exactly one winner.
The record keeps the job's message too, so whoever requeues it (the reaper, a retry,
a worker shutting down, an operator) pushes the very same task again.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import redis

from core import constants as C
from core.errors import JobNotFound
from state import fairshare, pipeline, queues, scripts
from state.bulk import PUBLISH_BATCH, Bulk
from state.jobrecord import JOB_KEY_PREFIX, JobRecord, JobState, fetch, fetch_many, job_key
from state.redis_conn import decoding

log = logging.getLogger("fleet.records")

CHARGE_DUE_MAX = 10_000  # runs a Records remembers when to charge next


@dataclass(frozen=True)
class PublishItem:
    """One job ready to publish: its record fields and its queued message."""

    job_id: str
    name: str
    list_key: str
    message: str  # JSON with the delivery-tag placeholder
    fields: dict[str, str]
    fallback_at: float | None = None  # prefer_cuda: when to copy it to fb_key


@dataclass(frozen=True)
class Claim:
    run: bool
    reason: str  # why it was dropped, or the attempt number when run
    attempts: int = 0  # counted towards max_attempts since the last publish (lua/claim.lua)
    runs: int = 0  # every run the job had, this one included: its number in `fleet logs`


@dataclass(frozen=True)
class Cancelled:
    """What ``Records.cancel`` did: whether this call cancelled the job, and the state it was
    in (for a job it did not cancel: the state it is in, a terminal one)."""

    done: bool
    was: JobState


def publish_call(it: PublishItem, force: bool, now: str) -> tuple[list[str], list[str]]:
    """lua/publish.lua's KEYS and ARGV for one job (a script that splices it in passes them)."""
    keys = [job_key(it.job_id), C.JOBS_INDEX, C.NAMES_INDEX, C.FALLBACK_ZSET, C.OWNER_LISTS_KEY]
    return keys, [
        it.job_id,
        it.name,
        now,
        "1" if force else "0",
        it.list_key,
        it.message,
        "" if it.fallback_at is None else str(it.fallback_at),
        *_flat(it.fields),
    ]


def _flat(fields: dict[str, Any]) -> list[str]:
    out: list[str] = []
    for k, v in fields.items():
        out += [k, v if isinstance(v, str) else json.dumps(v)]
    return out


def ask_reconcile(client: redis.Redis, lost: dict[str, float]) -> None:
    """Polls of these queues failed (queue -> when) with their reply maybe lost: the reaper
    reconciles them (``Records.reconcile_lost``); a later failure of a queue overrides."""
    client.hset(C.RECONCILE_KEY, mapping={key: repr(at) for key, at in lost.items()})


class Records:
    """Job records on one Redis connection (one that returns bytes is given a decoding twin)."""

    def __init__(
        self,
        client: redis.Redis,
        *,
        lease_ttl_s: float = C.LEASE_TTL_S,
        max_attempts: int = C.DEFAULT_MAX_ATTEMPTS,
        half_life_s: float | None = None,
    ):
        self.r = client = decoding(client)
        self.half_life_s = fairshare.half_life_s() if half_life_s is None else half_life_s
        self.lease_ttl_ms = int(lease_ttl_s * 1000)
        # a short lease (tests, small fleets) sweeps as often: the bound scales with it
        self.orphan_every_s = min(C.ORPHAN_SWEEP_EVERY_S, lease_ttl_s)
        self.max_attempts = max_attempts
        self._claim = scripts.script(client, "claim")
        self._heartbeat = scripts.script(client, "heartbeat")
        self._finish = scripts.script(client, "finish")
        self._reap = scripts.script(client, "reap")
        self._cancel = scripts.script(client, "cancel")
        self._adopt = scripts.script(client, "adopt")
        self._restore = scripts.script(client, "restore")
        self._trained = scripts.script(client, "trained")
        self._checkpoint = scripts.script(client, "checkpoint")
        self._charge = scripts.script(client, "charge")
        self._reconcile = scripts.script(client, "reconcile")
        self._charge_due: dict[str, float] = {}  # run token -> when to charge it next (heartbeat)

    # --- publishing ---------------------------------------------------------
    def states(self, job_ids: Iterable[str]) -> dict[str, JobState | None]:
        """Current state of each job (None: never published), a few thousand per script call.

        A stored state that is no JobState is read as the record's decoder reads it (left at
        its default, ``queued``: the job is there, and a publish without --force leaves it be)
        and logged, naming the jobs and the value, never raised: one bad record must not stop
        a publish or a listing of thousands."""
        out: dict[str, JobState | None] = {}
        bad: dict[str, str] = {}
        for jid, text in Bulk(self.r).states(job_ids).items():
            if not text:
                out[jid] = None
                continue
            rec = JobRecord.from_hash({"job_id": jid, "state": text})
            out[jid] = rec.state
            if rec.problems:
                bad[jid] = text
        if bad:
            jid, text = next(iter(bad.items()))
            log.warning(
                "%d job record(s) have a state that is no job state, e.g. %s: state=%r "
                "(read as queued; a state is one of %s): `fleet publish --force` of its manifest "
                "writes it again",
                len(bad),
                jid,
                text,
                ", ".join(s.value for s in JobState),
            )
        return out

    def publish(
        self,
        items: Iterable[PublishItem],
        force: set[str] = frozenset(),
        batch: int = PUBLISH_BATCH,
    ) -> list[tuple[str, str]]:
        """Create records and push messages atomically per job; returns (action, prior state).

        Batches of jobs go in one script call each (state.bulk); each job stays atomic."""
        now = str(time.time())
        return Bulk(self.r).publish(
            (publish_call(it, it.job_id in force, now) for it in items), batch
        )

    # --- a worker's side ----------------------------------------------------
    def claim(
        self, job_id: str, worker: str, token: str, spec: dict, queue: str, *, adopt: bool = False
    ) -> Claim:
        """Take a job to run it. A job with no record is dropped ('no record') unless
        ``adopt``: then a record is made for it (FLEET_ADOPT_UNPUBLISHED)."""
        action, detail, *runs = self._claim(
            # the jobs index is declared only when adopting writes it: Redis refuses a script
            # whose declared keys its user may not write (a worker's ACL user may not write it)
            keys=[
                job_key(job_id),
                C.LEASE_KEY + job_id,
                C.RUNNING_SET,
                C.FALLBACK_ZSET,
                *([C.JOBS_INDEX] if adopt else []),
            ],
            args=[
                job_id,
                worker,
                token,
                self.lease_ttl_ms,
                time.time(),
                json.dumps(spec),
                self.max_attempts,
                queue,
                "1" if adopt else "0",
            ],
        )
        if action != "run":
            return Claim(False, detail)
        return Claim(True, detail, int(detail), int(runs[0]))

    def heartbeat(self, job_id: str, token: str, **fields: Any) -> str:
        """Renew the lease; returns 'ok' or why the run must stop ('cancelled', 'lost', ...).
        Every USAGE_CHARGE_EVERY_S it also charges the run so far to its owner (fair share
        counts a long run while it runs, not only at its end)."""
        res = self._heartbeat(
            keys=[job_key(job_id), C.LEASE_KEY + job_id],
            args=[token, self.lease_ttl_ms, time.time(), *_flat(fields)],
        )
        if time.monotonic() >= self._charge_due.get(token, 0.0):
            if len(self._charge_due) > CHARGE_DUE_MAX:  # runs that ended elsewhere (lost, reaped)
                self._charge_due.clear()
            self._charge_due[token] = time.monotonic() + C.USAGE_CHARGE_EVERY_S
            self.charge(job_id, token)
        return res

    def finish(
        self,
        job_id: str,
        token: str,
        state: JobState,
        *,
        count_attempt: bool = True,
        release_rest: bool = True,
        **fields: Any,
    ) -> bool:
        """End a run owned by ``token``; False if the run no longer owns the job. The run's
        owner is charged first with what it held (once per run, also when it was cancelled).
        The end releases its followers (lua/release.lua); a fan-out too large for one slice
        is finished here (``release_rest``) unless the caller does it itself (a bench timing
        each slice); the reaper finishes it if this process dies first."""
        self.charge(job_id, token)
        self._charge_due.pop(token, None)
        res = self._finish(
            keys=[
                job_key(job_id),
                C.LEASE_KEY + job_id,
                C.RUNNING_SET,
                C.FALLBACK_ZSET,
                C.OWNER_LISTS_KEY,
            ],
            args=[token, state.value, time.time(), "1" if count_attempt else "0", *_flat(fields)],
        )
        if res == "more" and release_rest:
            self.release_rest()
        return res in ("ok", "more")

    def release_slice(self, upstream: str = "") -> tuple[int, int, str]:
        """One slice of a release left to finish (``state.pipeline.release_slice``)."""
        return pipeline.release_slice(self.r, upstream)

    def release_rest(self) -> list[str]:
        """Finish every release left (``state.pipeline.release_rest``)."""
        return pipeline.release_rest(self.r)

    def charge(self, job_id: str, token: str) -> float:
        """Charge the run ``token`` owns to its owner's fair-share usage (lua/charge.lua);
        returns the seconds charged (0: not its run, or charged already)."""
        return float(
            self._charge(
                keys=[job_key(job_id), C.USAGE_KEY], args=[token, time.time(), self.half_life_s]
            )
        )

    def adopt(self, job_id: str, artifact: dict, result: dict) -> str:
        """Record a kept bundle, now stored, as the job's success (see lua/adopt.lua)."""
        got = self._adopt(
            keys=[job_key(job_id), C.LEASE_KEY + job_id, C.RUNNING_SET],
            args=[job_id, time.time(), json.dumps(artifact), json.dumps(result)],
        )
        if got == "more":  # a large fan-out's followers: the rest of its release
            self.release_rest()
            return "ok"
        return got

    def mark_trained(
        self, job_id: str, token: str, host: str, work_dir: str, grace_s: float
    ) -> bool:
        """The run's trainer exited 0: record it (see lua/trained.lua).

        False if the run is stale.
        """
        return (
            self._trained(
                keys=[job_key(job_id), C.LEASE_KEY + job_id, C.RUNNING_SET],
                args=["mark", token, host, work_dir, time.time(), grace_s],
            )
            == "ok"
        )

    def resume_trained(self, job_id: str, token: str, host: str, work_dir: str) -> str:
        """A restarted worker takes back its dead run's trained job: 'ok', or the job's state."""
        return self._trained(
            keys=[job_key(job_id), C.LEASE_KEY + job_id, C.RUNNING_SET],
            args=["resume", token, host, work_dir, time.time(), self.lease_ttl_ms],
        )

    def checkpoint(self, job_id: str) -> dict | None:
        """The job's last synced checkpoint ({key, sha256, size, synced_at}), if any."""
        rec = fetch(self.r, job_id, ("checkpoint",))
        return rec.checkpoint if rec else None

    def record_checkpoint(self, job_id: str, token: str, value: dict) -> tuple[bool, dict | None]:
        """Make ``value`` the job's checkpoint if ``token`` owns it.

        Returns (recorded, the one it replaced).
        """
        old = self._checkpoint(keys=[job_key(job_id)], args=["record", token, json.dumps(value)])
        if old == "stale":
            return False, None
        return True, json.loads(old) if old else None

    def drop_checkpoint(self, job_id: str) -> dict | None:
        """Forget a succeeded job's checkpoint; returns it (for the caller to delete) or None."""
        old = self._checkpoint(keys=[job_key(job_id)], args=["drop", "", ""])
        return json.loads(old) if old else None

    def reap(self) -> list[str]:
        """Requeue or fail jobs whose lease expired; apply prefer_cuda fallbacks."""
        return self._reap(
            keys=[C.RUNNING_SET, C.FALLBACK_ZSET, C.OWNER_LISTS_KEY, C.USAGE_KEY],
            args=[time.time(), self.max_attempts, JOB_KEY_PREFIX, C.LEASE_KEY, self.half_life_s],
        )

    def reap_dead(self, runs: Iterable[tuple[str, str]]) -> list[str]:
        """Hand on now the jobs of runs known dead ((job_id, token) pairs whose worker process
        is gone), as the reaper would once their leases expired (see lua/reap.lua)."""
        pairs = [v for run in runs for v in run]
        if not pairs:
            return []
        return self._reap(
            keys=[C.RUNNING_SET, C.FALLBACK_ZSET, C.OWNER_LISTS_KEY, C.USAGE_KEY],
            args=[
                time.time(),
                self.max_attempts,
                JOB_KEY_PREFIX,
                C.LEASE_KEY,
                self.half_life_s,
                *pairs,
            ],
        )

    def restore_unacked(
        self, older_than_s: float | None = None, max_entries: int = 5000
    ) -> list[str]:
        """Give back messages a lost worker took but never claimed (see lua/restore.lua).

        Entries left alone (running jobs' own messages) are the oldest and come first, so
        ``max_entries`` must exceed the fleet's job slots; thousands is plenty."""
        older_than_s = 2 * self.lease_ttl_ms / 1000 if older_than_s is None else older_than_s
        return self._restore(
            keys=[C.KOMBU_UNACKED, C.KOMBU_UNACKED_INDEX, C.OWNER_LISTS_KEY],
            args=[time.time() - older_than_s, JOB_KEY_PREFIX, max_entries],
        )

    def reconcile_lost(self, chunk: int = C.RECONCILE_CHUNK) -> list[str]:
        """Push again the queued jobs whose message a lost poll reply took (lua/reconcile.lua).

        Only when a poll was lost: every list of its queues is read once and the records of
        jobs created before it are looked at, each in chunks of ``chunk`` per script call."""
        wanted = self.r.hgetall(C.RECONCILE_KEY)
        if not wanted:
            return []
        before = max(float(at) for at in wanted.values()) + C.RECONCILE_SKEW_S
        self.r.delete(C.RECONCILE_SEEN_KEY)
        owners = queues.registered(self.r)
        for key in (k for q in wanted for k in queues.keys_of(q, owners.get(q, ()))):
            self._read_tags(C.RECONCILE_SEEN_KEY, key, chunk)
        out: list[str] = []
        for ids in self._created_before(before, chunk):
            out += self._reconcile(
                keys=[C.RECONCILE_SEEN_KEY, C.RECONCILE_KEY, C.KOMBU_UNACKED, C.OWNER_LISTS_KEY],
                args=["jobs", JOB_KEY_PREFIX, *ids],
            )
        self.r.delete(C.RECONCILE_SEEN_KEY)
        self._reconcile(keys=[C.RECONCILE_KEY], args=["forget", *_flat(wanted)])
        return out

    def sweep_orphans(self, chunk: int = C.RECONCILE_CHUNK) -> list[str]:
        """Push again the queued jobs whose latest message is in no list, not in kombu's
        unacked hash and not in the dead letter, found so by two sweeps at the same push
        (lua/reconcile.lua 'orphans'). Needs no report of a loss: a failover drops writes
        the old master acknowledged (a pop replicated, its unacked entry not) unseen.

        At most one sweep per ``orphan_every_s`` in the whole fleet (a key with that TTL,
        whichever reaper takes it); the push is fenced in Lua, so two sweeps at once, or one
        retried, push a job once."""
        every_ms = int(self.orphan_every_s * 1000)
        if not self.r.set(C.ORPHAN_SWEEP_KEY, "1", nx=True, px=every_ms):
            return []
        # half the period: a sweep one period after the last is never a hair too early
        return self.push_orphans(grace_s=self.orphan_every_s / 2, chunk=chunk)

    def push_orphans(self, grace_s: float, chunk: int = C.RECONCILE_CHUNK) -> list[str]:
        """One sweep, whenever called: note the queued jobs without a message, and push again
        those noted at the same push at least ``grace_s`` ago (``sweep_orphans`` paces it)."""
        queued: dict[str, str] = {}  # job id -> the list its latest message went to
        for ids in self._created_before(float("inf"), chunk):
            # only reads: no WAIT for replicas, and a read-only call runs on a demoted master
            flat = scripts.read_only(self.r, "reconcile", [], ["queued", JOB_KEY_PREFIX, *ids])
            queued.update(zip(flat[::2], flat[1::2], strict=True))
        # a job noted earlier that is no longer queued is forgotten by the same call
        ids = list(dict.fromkeys([*queued, *self.r.hkeys(C.ORPHANS_KEY)]))
        if not ids:
            return []
        seen = C.ORPHAN_SEEN_KEY + uuid.uuid4().hex  # its own: two sweeps never share one
        try:
            for key in set(queued.values()):
                self._read_tags(seen, key, chunk)
            out: list[str] = []
            for start in range(0, len(ids), chunk):
                out += self._reconcile(
                    keys=[
                        seen,
                        C.KOMBU_UNACKED,
                        C.OWNER_LISTS_KEY,
                        C.ORPHANS_KEY,
                        C.DEAD_LETTER_KEY,
                    ],
                    args=[
                        "orphans",
                        JOB_KEY_PREFIX,
                        int(grace_s * 1000),
                        *ids[start : start + chunk],
                    ],
                )
        finally:
            self.r.delete(seen)
        return out

    def _read_tags(self, seen: str, key: str, chunk: int) -> None:
        """Put the delivery tags of list ``key`` into set ``seen``, ``chunk`` entries a call
        (read from the head: pushes there and pops at the tail skip no entry that stays)."""
        start, got = 0, chunk
        while got == chunk:
            got = self._reconcile(
                keys=[seen], args=["seen", key, start, chunk, C.RECONCILE_SEEN_TTL_MS]
            )
            start += chunk

    def _created_before(self, before: float, chunk: int) -> Iterable[list[str]]:
        """Job ids created up to ``before``, oldest first, ``chunk`` at a time."""
        start = 0
        while True:
            rows = self.r.zrange(C.JOBS_INDEX, start, start + chunk - 1, withscores=True)
            ids = [jid for jid, created in rows if created <= before]
            if ids:
                yield ids
            if len(ids) < chunk:
                return
            start += chunk

    # --- operators ------------------------------------------------------------
    def get(self, job_id: str) -> JobRecord:
        rec = fetch(self.r, job_id)
        if rec is None:
            raise JobNotFound(f"no record for job {job_id}")
        return rec

    def all(self, limit: int | None = None) -> list[JobRecord]:
        ids = self.r.zrange(C.JOBS_INDEX, 0, -1 if limit is None else limit - 1)
        return fetch_many(self.r, ids)

    def cancel(self, job_id: str) -> Cancelled:
        """Cancel a queued or running job (lua/cancel.lua); a finished one is left as it is."""
        done, was = self._cancel(
            keys=[job_key(job_id), C.LEASE_KEY + job_id, C.RUNNING_SET, C.FALLBACK_ZSET],
            args=[job_id, time.time()],
        )
        if not was:
            raise JobNotFound(f"no record for job {job_id}")
        return Cancelled(done == "1", JobState(was))

    def requeue(self, job_id: str) -> str:
        """Run a finished job again (same ID, attempts reset); returns its prior state."""
        item = self.rerun_item(job_id)
        if isinstance(item, JobState):
            return item.value
        return self.publish([item], force={job_id})[0][1]

    def rerun_item(self, job_id: str) -> PublishItem | JobState:
        """What runs ``job_id`` again: its first message on its first queue; its state when
        it has not ended (nothing to run again). Raises JobNotFound."""
        rec = fetch(
            self.r, job_id, ("state", "name", "pri_key", "pri_msg", "pri_queue", "fb_grace_s")
        )
        if rec is None:
            raise JobNotFound(f"no record for job {job_id}")
        if not rec.state.terminal:
            return rec.state
        sent = rec.copy("pri")
        if sent is None:
            raise JobNotFound(
                f"job {job_id} was not published by fleet; publish its manifest again"
            )
        fallback_at = time.time() + rec.fb_grace_s if rec.fb_grace_s is not None else None
        return PublishItem(
            job_id, rec.name, sent.key, sent.message, {"queue": rec.pri_queue}, fallback_at
        )
