"""`fleet publish`: turn a validated manifest into queued jobs, idempotently.

``plan`` is pure (manifest + current states -> what to do and why); ``publish`` does the
I/O: one pipelined pass of Lua scripts that create each record with its message.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass

import redis
from celery import Celery

from core import constants as C
from core.errors import FleetError
from core.gcpause import gc_paused
from fleet import owners, publish_search, staging
from fleet.message_template import MessageTemplates
from fleet.messages import MessageFactory
from fleet.ordering import demanding_first
from fleet.pickup import announce
from fleet.route_cache import RouteCache
from manifest import pipeline
from manifest.schema import JobSpec, Manifest
from state import events
from state.jobrecord import JobState
from state.records import PublishItem, Records

# reads back and publishes again what a failover dropped during the publish, at most this often
REPUBLISH_TRIES = 3


@dataclass(frozen=True)
class PlanRow:
    """What publishing does with one job, or with one search (``search_id``; ``job`` its base
    job, whose trials are published as the search advances)."""

    job: JobSpec
    queue: str
    fallback_queue: str | None
    action: str  # publish | skip
    why: str
    search_id: str | None = None

    @property
    def ref(self) -> str:
        """The ID an operator uses for the row: the job's, or the search's."""
        return self.search_id or self.job.job_id

    def to_dict(self) -> dict:
        return {
            "job_id": None if self.search_id else self.job.job_id,
            "search_id": self.search_id,
            "name": self.job.name,
            "queue": self.queue,
            "action": self.action,
            "why": self.why,
            "fallback_queue": self.fallback_queue,
        }


def _why_skip(state: JobState) -> str:
    if state is JobState.SUCCEEDED:
        return "already succeeded (use --force NAME to run it again)"
    if state in (JobState.FAILED, JobState.CANCELLED):
        return f"{state.value} earlier (use --force NAME or `fleet requeue` to run it again)"
    if state is JobState.WAITING:
        return "waiting for its upstreams (`fleet why NAME` says which)"
    return f"already {state.value}"


def plan(
    manifest: Manifest, states: dict[str, JobState | None], force: frozenset[str] = frozenset()
) -> list[PlanRow]:
    """What publishing would do for each job, and why."""
    rows = []
    route = RouteCache(manifest)
    for job in manifest.jobs:
        r = route(job)
        assert r is not None, "the loader rejects jobs no tier guarantees"
        state = states.get(job.job_id)
        forced = job.name in force or job.job_id in force
        if state is None:
            action, why = "publish", "new job" + pipeline.waits_note(job.after)
        elif state is JobState.RUNNING:
            action, why = "skip", "running now (cancel it first to re-run)"
        elif forced:
            action, why = "publish", f"--force (was {state.value})"
        else:
            action, why = "skip", _why_skip(state)
        if action == "publish" and r.fallback_queue:
            why += f"; falls back to {r.fallback_queue} after {job.prefer_cuda_grace_s:g}s"
        rows.append(PlanRow(job, r.queue, r.fallback_queue, action, why))
    return rows


def constraint_queues(manifest: Manifest) -> dict[str, str]:
    """Constraint queue name -> JSON {tier, constraint}, for workers to subscribe by."""
    out = {}
    route = RouteCache(manifest)
    for job in manifest.jobs + tuple(s.base for s in manifest.searches):
        r = route(job)
        for tier, queue, c in (
            (r.tier, r.queue, r.constraint),
            (r.fallback_tier, r.fallback_queue, r.fallback_constraint),
        ):
            if c is not None:
                out[queue] = json.dumps({"tier": tier, "constraint": c.to_dict()})
    return out


def config_fields(manifest: Manifest) -> dict[str, str]:
    """What workers read to pick their queues: the tiers and host policies."""
    return {
        "tiers": json.dumps([t.to_dict() for t in manifest.tiers]),
        "hosts": json.dumps({n: h.to_dict() for n, h in manifest.hosts.items()}),
        "manifest": manifest.path,
        "published_at": str(time.time()),
    }


def publish(
    app: Celery,
    client: redis.Redis,
    manifest: Manifest,
    *,
    force: frozenset[str] = frozenset(),
    dry_run: bool = False,
    progress=None,
    store=None,
    owner: str | None = None,
) -> list[PlanRow]:
    """Publish every job that needs it; returns the rows with what actually happened.

    Each new job's record names its own ``owner`` key, else ``owner`` (default:
    ``fleet.owners.resolve``); a job that already has a record keeps its first owner unless
    ``force`` runs it again."""
    owner = owners.resolve(owner)
    records = Records(client)
    client = records.r  # replies decoded, whatever client the caller passed
    rows = plan(manifest, records.states(j.job_id for j in manifest.jobs), force)
    found = publish_search.plan(client, manifest)
    found_rows = [_search_row(f) for f in found]
    if dry_run:
        return rows + found_rows
    publish_search.refuse(found)  # before any byte is staged or any job queued
    # the fleet's store, or a refusal naming both when this publisher names another
    store = store or staging.fleet_store(client, app.conf.broker_url)
    todo = demanding_first(
        [r for r in rows if r.action == "publish"], manifest.tiers, manifest.hosts
    )
    new_searches = [r for r in found if r.action == "publish"]
    # data first: no message may name bytes the store lacks (fleet.staging)
    staging.stage(
        manifest,
        [r.job for r in todo] + [s.spec.base for s in new_searches],
        progress=progress,
        store=store,
    )
    client.hset(C.CONFIG_KEY, mapping=config_fields(manifest))
    cq = constraint_queues(manifest)
    known = set(client.hkeys(C.CQUEUES_KEY)) if cq else set()
    if cq:
        client.hset(C.CQUEUES_KEY, mapping=cq)
    # idle hosts see new queues first
    announce(client, manifest, {q: v for q, v in cq.items() if q not in known})
    forced = [r for r in todo if r.why.startswith("--force")]
    # a re-run's reset reaches Flower before its message can reach a worker (state.events)
    events.announce_queued(
        app,
        (
            events.QueuedJob(
                r.job.job_id, r.job.name, r.queue, rerun=True, owner=r.job.owner or owner
            )
            for r in forced
        ),
    )
    forced_ids = frozenset(r.job.job_id for r in forced)
    with app.connection_for_write() as conn, gc_paused():
        factory = MessageTemplates(MessageFactory(app, conn.default_channel))
        sent_at = time.time()
        # a generator: messages are built while Redis stores the previous batch
        results = records.publish((_item(factory, row, owner) for row in todo), force=forced_ids)
        results = make_good(
            records,
            todo,
            results,
            lambda rows: records.publish(
                (_item(factory, r, owner) for r in rows), force=forced_ids
            ),
        )
        publish_search.publish(client, factory, new_searches, owner, record_fields)
    events.announce_queued(
        app,
        (
            events.QueuedJob(row.job.job_id, row.job.name, row.queue, owner=row.job.owner or owner)
            for row, res in zip(todo, results, strict=True)
            if res[0] == "publish" and row.job.job_id not in forced_ids
        ),
        sent_at=sent_at,
    )
    by_id = {row.job.job_id: res for row, res in zip(todo, results, strict=True)}
    out = []
    for row in rows:
        res = by_id.get(row.job.job_id)
        if res is not None and res[0] == "skip":  # lost a race with another publisher
            row = PlanRow(
                row.job, row.queue, row.fallback_queue, "skip", _why_skip(JobState(res[1]))
            )
        out.append(row)
    return out + found_rows


def make_good(
    records: Records,
    rows: list[PlanRow],
    results: list[tuple[str, str]],
    again: Callable[[list[PlanRow]], list[tuple[str, str]]],
) -> list[tuple[str, str]]:
    """``results`` of publishing ``rows``, once every row's job has a record on the master that
    serves now. A failover during the publish drops the batches the old master acknowledged
    but had not replicated; those rows are published ``again`` (idempotent: a job recorded
    meanwhile is skipped), so a publish that returns leaves no job of it unrecorded."""
    results = list(results)
    for _ in range(REPUBLISH_TRIES):
        states = records.states(row.job.job_id for row in rows)
        lost = [i for i, row in enumerate(rows) if states[row.job.job_id] is None]
        if not lost:
            return results
        for i, res in zip(lost, again([rows[i] for i in lost]), strict=True):
            results[i] = res
    raise FleetError(
        f"publish: {len(lost)} job(s) (first: {rows[lost[0]].job.name!r}) still have no record "
        f"after {REPUBLISH_TRIES} tries: the broker loses what it acknowledged (failovers "
        "under way?); check its replicas, then publish again: it is idempotent"
    )


def offline_plan(manifest: Manifest, force: frozenset[str] = frozenset()) -> list[PlanRow]:
    """The plan with no broker to ask: every job and search as if none was published before."""
    return plan(manifest, {}, force) + [_search_row(f) for f in publish_search.plan(None, manifest)]


def _search_row(row: publish_search.SearchRow) -> PlanRow:
    """A search as a plan row: its base job and the search's id."""
    return PlanRow(row.spec.base, row.queue, None, row.action, row.why, row.spec.search_id)


def record_fields(job: JobSpec, queue: str, owner: str) -> dict[str, str]:
    """The record fields every job of ``job``'s kind gets (a search's trials too)."""
    fields = {"queue": queue, "priority": str(job.priority), "owner": owner}
    if job.max_attempts is not None:
        fields["max_attempts"] = str(job.max_attempts)
    return fields


def _item(factory: MessageTemplates, row: PlanRow, owner: str) -> PublishItem:
    job = row.job
    owner = job.owner or owner  # the job's own owner key outranks the publisher's
    spec = json.dumps(job.to_dict())
    fields = {
        "job_id": job.job_id,
        "name": job.name,
        "spec": spec,
        **record_fields(job, row.queue, owner),
        **pipeline.record_fields(job.after, job.inputs, job.params_from),
    }
    fallback_at = None
    if row.fallback_queue:
        fields.update(
            fallback_queue=row.fallback_queue,
            fb_grace_s=str(job.prefer_cuda_grace_s),
            fb_key=factory.list_key(row.fallback_queue, job.priority, owner),
            fb_msg=factory.message(job, row.fallback_queue, spec, owner),
        )
        fallback_at = time.time() + job.prefer_cuda_grace_s
    return PublishItem(
        job.job_id,
        job.name,
        factory.list_key(row.queue, job.priority, owner),
        factory.message(job, row.queue, spec, owner),
        fields,
        fallback_at,
    )
