"""Sweep the bundles runs staged and left: promote what a record names, delete strays.

One worker at a time sweeps (a Redis lock, every ``fleet_stray_sweep_every_s``), so a run
that died between its record and its promotion still has its bundle listed, and a
superseded run that died before it could discard its bundle leaves nothing behind once
``fleet_staged_grace_s`` has passed (``artifacts.strays`` decides).
"""

from __future__ import annotations

import logging
import time

import redis

from artifacts.stores import Store
from artifacts.strays import Verdict, verdict
from core import constants as C
from core.errors import JobNotFound, StoreError
from core.ids import short_id
from state.records import Records

log = logging.getLogger("fleet.strays")
DONE = {Verdict.PROMOTE: "promoted", Verdict.DISCARD: "discarded"}


def sweep(records: Records, store: Store, grace_s: float, now: float | None = None) -> list[str]:
    """Promote or delete each staged bundle as ``artifacts.strays.verdict`` says; one line
    per bundle acted on. The staged bundles are listed before any record is read, so a
    bundle staged after the listing is left to the next sweep."""
    staged = store.staged()
    now = time.time() if now is None else now
    named: dict[str, str | None] = {}
    done = []
    for bundle in staged:
        if bundle.job_id is not None and bundle.job_id not in named:
            named[bundle.job_id] = _recorded_sha256(records, bundle.job_id)
        action = verdict(bundle, named.get(bundle.job_id) if bundle.job_id else None, now, grace_s)
        if action is Verdict.PROMOTE:
            store.promote(bundle.token, bundle.kind, bundle.sha256)
        elif action is Verdict.DISCARD:
            store.discard(bundle.token, bundle.kind, bundle.sha256)
        if action is not Verdict.KEEP:
            done.append(
                f"{DONE[action]} bundle {short_id(bundle.sha256)} of job {bundle.job_id or '?'} "
                f"staged by run {short_id(bundle.token)}"
            )
    return done


def _recorded_sha256(records: Records, job_id: str) -> str | None:
    try:
        artifact = records.get(job_id).artifact
    except JobNotFound:
        return None
    return (artifact or {}).get("sha256")


def loop(ctx) -> None:
    """A worker thread: sweep whenever no other worker did within the interval (its own
    thread: a slow store never holds up the reaper)."""
    every_s = ctx.app.conf.fleet_stray_sweep_every_s
    while not ctx.shutdown.wait(every_s):
        try:
            me = ctx.nodename or ctx.hostname
            if ctx.redis.set(C.STRAY_SWEEP_LOCK, me, nx=True, px=int(every_s * 1000)):
                for line in sweep(ctx.records, ctx.open_store(), ctx.app.conf.fleet_staged_grace_s):
                    log.warning("fleet sweep: %s", line)
        except (StoreError, redis.RedisError) as e:  # the next interval tries again
            log.warning("fleet sweep of staged bundles failed (%s); will retry", e)
