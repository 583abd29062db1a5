"""`fleet why JOB`: the job's queue, every live host's verdict, and where it waits.

I/O only: reads the record, the published config and the host heartbeats, then asks the
pure ``routing.explain`` for verdicts; counts messages ahead in the queue's lists (kombu's
plain ones, then each owner's in fair-share order: state.queues) and says when the job
waits for fair share (``routing.fairshare.explain``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import redis

from core import constants as C
from fleet.messages import TAG_PLACEHOLDER
from fleet.query.hosts import HostView, live_hosts
from fleet.query.searches import of_job
from manifest.schema import Needs
from routing import fairshare as F
from routing.explain import (
    HostFacts,
    QueueFacts,
    Verdict,
    explain,
    fleet_lacks,
    nearest,
    queue_facts,
    waits_for,
)
from routing.pool import demand_of
from routing.yielding import yield_note
from state import fairshare
from state import queues as Q
from state.cluster import ClusterConfig, read_config
from state.jobrecord import JobRecord, fetch
from state.records import Records

PRIORITIES = Q.PRIORITY_STEPS  # kombu's priority_steps (celeryconfig): 0..9


def host_facts(view: HostView, config: ClusterConfig) -> HostFacts:
    """A live host as the current config sees it (policy caps applied to what it detected)."""
    return HostFacts(config.effective(view.detected_cap()), view.queues, view.asked)


def depths(client: redis.Redis, queues: list[str]) -> dict[str, list[int]]:
    """Messages waiting per queue, by wire priority (every owner's lists counted)."""
    return Q.depths(client, queues)


@dataclass(frozen=True)
class FairView:
    """Fair share as workers see it now: owners least used first, and what they used."""

    order: list[str]
    usage: dict[str, F.Usage]
    shares: dict[str, float]
    now: float
    half_life_s: float

    def explain(self, owner: str, among: set[str]) -> str | None:
        """Why ``owner``'s jobs wait for those of the owners in ``among`` (None: they do not)."""
        names = among | {owner}
        return F.explain(
            owner,
            {o: self.usage.get(o, F.Usage()) for o in names},
            self.shares,
            self.now,
            self.half_life_s,
        )


def fair_view(client: redis.Redis, owners: set[str]) -> FairView:
    half_life, now = fairshare.half_life_s(), time.time()
    usage = {o: u.usage() for o, u in fairshare.read_usage(client).items()}
    shares = fairshare.read_shares(client)
    names = {o: usage.get(o, F.Usage()) for o in owners}
    return FairView(F.order(names, shares, now, half_life), usage, shares, now, half_life)


def _split_key(key: str) -> tuple[str, int]:
    k = Q.parse(key)
    return k.queue, k.wire_pri


def position(client: redis.Redis, job_id: str, queue: str, depth: list[int]) -> dict:
    """Messages ahead of the job in ``queue``, in the order workers serve it (state.queues):
    kombu's plain lists, every owner's served before the job's own (fair share), its owner's
    more urgent ones, and those nearer the tail of its own list (kombu pops with BRPOP).
    ``ahead`` is None when its message is not in a list (a worker took it, or it waits as
    the other copy); ``fair_share`` says when other owners' jobs go first."""
    out = _position_in_lists(client, job_id, queue, depth, fetch(client, job_id))
    key, ahead_own = out.pop("key", None), out.pop("ahead_in_owner", None)
    owner = key and Q.parse(key).owner
    if not owner:  # not waiting, or in kombu's plain lists: served before any owner's
        out["ahead"] = ahead_own
        return out
    per_owner = Q.owner_depths(client, queue)
    waiting = {o for o, n in per_owner.items() if o and n}
    view = fair_view(client, waiting | {owner})
    first = view.order[: view.order.index(owner)]
    out["ahead"] = per_owner.get(None, 0) + sum(per_owner.get(o, 0) for o in first) + ahead_own
    out["fair_share"] = view.explain(owner, set(first)) if first else None
    return out


def _position_in_lists(
    client: redis.Redis, job_id: str, queue: str, depth: list[int], rec: JobRecord | None
) -> dict:
    found = None
    for copy in rec.copies if rec else ():
        key, msg = copy.key, copy.message
        if not key or _split_key(key)[0] != queue:
            continue
        for n in range(rec.pushes, 0, -1):  # the newest copy first
            idx = client.lpos(key, msg.replace(TAG_PLACEHOLDER, f"{job_id}.{n}"))
            if idx is not None:
                found = (key, idx)
                break
        if found:
            break
    out = {
        "queue": queue,
        "in_list": found is not None,
        "ahead": None,
        "waiting_in_queue": sum(depth),
    }
    if found:
        key, idx = found
        pri = _split_key(key)[1]
        pipe = client.pipeline(transaction=False)
        for p in PRIORITIES[:pri]:
            pipe.llen(_same_list(key, p))
        out.update(key=key, ahead_in_owner=sum(pipe.execute()) + client.llen(key) - 1 - idx)
    return out


def _same_list(key: str, wire_pri: int) -> str:
    """The list of ``key``'s queue and owner at another priority."""
    k = Q.parse(key)
    return Q.owner_key(k.queue, k.owner, wire_pri)


def why(client: redis.Redis, name_or_id: str) -> dict:
    from fleet.query.refs import resolve  # the resolver every verb uses

    rec = Records(client).get(resolve(client, name_or_id))
    config = read_config(client)
    views = live_hosts(client)
    facts = {v.hostname: host_facts(v, config) for v in views}
    spec = rec.spec or {}
    model = spec.get("model") or "command"
    queues = _job_queues(client, rec)
    depth = depths(client, sorted({q for v in views for q in v.queues} | set(queues)))
    out = {
        "job_id": rec.job_id,
        "name": rec.name,
        "state": rec.state.value,
        "worker": rec.worker,
        "attempts": rec.attempts,
        "last_error": rec.last_error,
        "queues": [],
    }
    for queue in queues:
        q = queue_facts(queue, config.tiers, config.constraint_queues)
        verdicts = explain(q, model, facts.values(), config.hosts or {})
        out["queues"].append(_queue_report(client, rec, q, config, verdicts, views, depth))
    if (
        search := of_job(client, rec.job_id)
    ) is not None:  # a trial: its search's line, why it stopped
        out["search"] = {
            "summary": search.summary(),
            "stopped": search.stopped,
            "last_failure": search.last_failure,
            "trial_failed": _trial_reason(client, search.search_id, rec),
            "search_id": search.search_id,
        }
    return out


def _trial_reason(client: redis.Redis, search_id: str, rec: JobRecord) -> str:
    """Why this trial failed for its search though its job succeeded ('' when it did not)."""
    from state.search.store import key

    number = client.hget(C.JOB_KEY + rec.job_id, "trial")
    got = client.hget(key(search_id, "trial", number), "reason") if number is not None else None
    return got.decode() if isinstance(got, bytes) else got or ""


WHY_SWEEP_MAX = 20  # a sweep's base name explains this many of its jobs, waiting ones first


def why_each(client: redis.Redis, ref: str) -> tuple[bool, list[dict], str | None]:
    """``why`` for one job, or (True, ...) for each job of a sweep named by its base name (as
    cancel and requeue accept it), jobs that have not ended first; and the note on a name
    other jobs share (``fleet.query.refs.pick``)."""
    from fleet.query.refs import lookup, pick

    res = lookup(client, ref)
    if res.how != "sweep":
        picked = pick(client, ref, "why")
        return False, [why(client, picked.job_id)], picked.note
    reports = [why(client, hit.job_id) for hit in res.hits]
    reports.sort(key=lambda r: r["state"] in ("succeeded", "failed", "cancelled", "pruned"))
    return True, reports[:WHY_SWEEP_MAX], None


def _job_queues(client: redis.Redis, rec: JobRecord) -> list[str]:
    out = [q for q in (rec.pri_queue or rec.queue, rec.fallback_queue) if q]
    return list(dict.fromkeys(out))


def _queue_report(
    client,
    rec: JobRecord,
    q: QueueFacts,
    config: ClusterConfig,
    verdicts: list[Verdict],
    views: list[HostView],
    depth: dict[str, list[int]],
) -> dict:
    tier = next((t for t in config.tiers if t.name == q.tier), None)
    by_name = {v.hostname: v for v in views}
    waiting = rec.state.value == "queued"
    capable = []
    for v in verdicts:
        if not v.ok:
            continue
        view = by_name[v.hostname]
        served_first = view.queues[: view.queues.index(q.name)] if q.name in view.queues else ()
        capable.append(
            {
                "host": v.hostname,
                "slots": view.slots,
                "busy_with": [
                    {"job_id": r.job_id, "name": r.name, "queue": r.queue} for r in view.running
                ],
                "waiting_in_queues_it_serves_first": sum(
                    sum(depth.get(s, ())) for s in served_first
                ),
                "lacks_now": lacks_now(rec, q, view) if waiting else None,
            }
        )
    report = {
        **q.to_dict(),
        "floor": None if tier is None else tier.to_dict(),
        "hosts": [v.to_dict() for v in verdicts],
        "capable": capable,
        "nearest": None,
        "no_live_host_has": None,
    }
    if not capable and verdicts:
        report["nearest"] = nearest(verdicts).to_dict()
        report["no_live_host_has"] = fleet_lacks(
            q.needs, [c for c in (host_cap(v, config) for v in views) if c]
        )
    if waiting:
        report["position"] = position(client, rec.job_id, q.name, depth[q.name])
    return report


def host_cap(view: HostView, config: ClusterConfig):
    cap = view.detected_cap()
    return None if cap is None else config.effective(cap)


def lacks_now(rec: JobRecord, q: QueueFacts, view: HostView) -> str | None:
    """What the job lacks on ``view``'s host now, from its pool ("needs 2 free GPUs with >= 24
    GiB: big4 has 1 free, busy with a, b"); None when it would start there now, or when the
    host's heartbeat has no pool (an older worker)."""
    pool = view.resources()
    if pool is None:
        return None
    demand = demand_of(Needs(**(rec.spec or {}).get("needs", {})), on_gpu=q.needs.require_cuda)
    names = {r.job_id: r.name for r in view.running}
    said = waits_for(view.hostname, pool.pool(), demand, pool.holdings(names))
    if said and demand.gpus and pool.yielded():
        said += "; " + yield_note(pool.yielded())
    return said
