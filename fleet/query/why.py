"""`fleet why JOB`: the job's queue, every live host's verdict, and where it waits.

I/O only: reads the record, the published config and the host heartbeats, then asks the
pure ``routing.explain`` for verdicts; counts messages ahead in the queue's lists (kombu's
plain ones, then each owner's in fair-share order: state.queues) and says when the job
waits for fair share (``routing.fairshare.explain``). The answer is a ``WhyReport`` (frozen
values); ``to_dict`` is `fleet why --json`.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass

import redis

from core import constants as C
from fleet.query.hosts import HostView, live_hosts
from fleet.query.pipeline import Edge, edges_of
from fleet.query.searches import of_job
from manifest.schema import Needs, TierSpec
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
from state.gang import Gangs
from state.jobrecord import TAG_PLACEHOLDER, JobRecord, JobState, fetch
from state.records import Records

PRIORITIES = Q.PRIORITY_STEPS  # kombu's priority_steps (celeryconfig): 0..9


@dataclass(frozen=True)
class Position:
    """Where a waiting job's message is in its queue. ``ahead`` is None when its message is
    in no list (a worker took it, or it waits as the other copy); ``fair_share`` says why
    other owners' jobs go first, when they do."""

    queue: str
    in_list: bool
    ahead: int | None
    waiting_in_queue: int
    fair_share: str | None = None

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Busy:
    """A job a capable host runs now."""

    job_id: str
    name: str
    queue: str


@dataclass(frozen=True)
class Capable:
    """A live host that could run the job: what it runs, what waits in the queues it serves
    first, and what the job lacks there now (None: it would start now, or not waiting)."""

    host: str
    slots: int
    busy_with: tuple[Busy, ...]
    waiting_first: int
    lacks_now: str | None

    def to_dict(self) -> dict:
        return {
            "host": self.host,
            "slots": self.slots,
            "busy_with": [asdict(b) for b in self.busy_with],
            "waiting_in_queues_it_serves_first": self.waiting_first,
            "lacks_now": self.lacks_now,
        }


@dataclass(frozen=True)
class QueueReport:
    """One of the job's queues (its own, then its prefer_cuda fallback): what a host needs
    for it, every live host's verdict, and, while the job waits, its position."""

    facts: QueueFacts
    floor: TierSpec | None
    hosts: tuple[Verdict, ...]
    capable: tuple[Capable, ...]
    nearest: Verdict | None = None
    no_live_host_has: str | None = None
    position: Position | None = None

    def to_dict(self) -> dict:
        d = {
            **self.facts.to_dict(),
            "floor": None if self.floor is None else self.floor.to_dict(),
            "hosts": [v.to_dict() for v in self.hosts],
            "capable": [c.to_dict() for c in self.capable],
            "nearest": None if self.nearest is None else self.nearest.to_dict(),
            "no_live_host_has": self.no_live_host_has,
        }
        if self.position is not None:
            d["position"] = self.position.to_dict()
        return d


@dataclass(frozen=True)
class SearchNote:
    """A trial's search: its one line, why it issues no more trials ('' while it may), its
    last failed trial's reason, and why this trial failed for it though its job succeeded."""

    search_id: str
    summary: str
    stopped: str
    last_failure: str = ""
    trial_failed: str = ""


@dataclass(frozen=True)
class WhyReport:
    """`fleet why` of one job."""

    job_id: str
    name: str
    state: JobState
    worker: str
    attempts: int
    last_error: str
    queues: tuple[QueueReport, ...]
    search: SearchNote | None = None
    gang: dict | None = None  # a gang's hosts and seats (gang_report), for nodes = N
    reason: str = ""  # how its last run ended, in one line (JobRecord.reason)
    runs: int = 0  # every run it had
    rerun_reason: str = ""  # why its latest run is not its first (JobRecord.rerun_reason)
    # a pipeline's follower: its upstreams as they stand, and the one that cancelled it
    upstreams: tuple[Edge, ...] = ()
    cancelled_by: dict | None = None

    def to_dict(self) -> dict:
        d = {
            "job_id": self.job_id,
            "name": self.name,
            "state": self.state.value,
            "worker": self.worker,
            "attempts": self.attempts,
            "runs": self.runs,
            "rerun_reason": self.rerun_reason,
            "last_error": self.last_error,
            "reason": self.reason,
            "queues": [q.to_dict() for q in self.queues],
        }
        if self.search is not None:
            d["search"] = {
                "summary": self.search.summary,
                "stopped": self.search.stopped,
                "last_failure": self.search.last_failure,
                "trial_failed": self.search.trial_failed,
                "search_id": self.search.search_id,
            }
        if self.gang is not None:
            d["gang"] = self.gang
        if self.upstreams:
            d["upstreams"] = [e.to_dict() for e in self.upstreams]
            d["waits_on"] = [e.name for e in self.upstreams if e.awaited]
        if self.cancelled_by is not None:
            d["cancelled_by"] = self.cancelled_by
        return d


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


def position(client: redis.Redis, job_id: str, queue: str, depth: list[int]) -> Position:
    """Messages ahead of the job in ``queue``, in the order workers serve it (state.queues):
    kombu's plain lists, every owner's served before the job's own (fair share), its owner's
    more urgent ones, and those nearer the tail of its own list (kombu pops with BRPOP)."""
    found = _in_lists(client, job_id, queue, fetch(client, job_id))
    here = Position(queue, found is not None, None, sum(depth))
    if found is None:
        return here
    key, ahead_own = found
    owner = Q.parse(key).owner
    if not owner:  # in kombu's plain lists: served before any owner's
        return Position(queue, True, ahead_own, sum(depth))
    per_owner = Q.owner_depths(client, queue)
    waiting = {o for o, n in per_owner.items() if o and n}
    view = fair_view(client, waiting | {owner})
    first = view.order[: view.order.index(owner)]
    ahead = per_owner.get(None, 0) + sum(per_owner.get(o, 0) for o in first) + ahead_own
    fair = view.explain(owner, set(first)) if first else None
    return Position(queue, True, ahead, sum(depth), fair)


def _in_lists(
    client: redis.Redis, job_id: str, queue: str, rec: JobRecord | None
) -> tuple[str, int] | None:
    """The list the job's message waits in, and how many its owner has ahead of it there."""
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
    if found is None:
        return None
    key, idx = found
    pri = _split_key(key)[1]
    pipe = client.pipeline(transaction=False)
    for p in PRIORITIES[:pri]:
        pipe.llen(_same_list(key, p))
    return key, sum(pipe.execute()) + client.llen(key) - 1 - idx


def _same_list(key: str, wire_pri: int) -> str:
    """The list of ``key``'s queue and owner at another priority."""
    k = Q.parse(key)
    return Q.owner_key(k.queue, k.owner, wire_pri)


def why(client: redis.Redis, name_or_id: str) -> WhyReport:
    from fleet.query.refs import resolve  # the resolver every verb uses

    rec = Records(client).get(resolve(client, name_or_id))
    config = read_config(client)
    views = live_hosts(client)
    facts = {v.hostname: host_facts(v, config) for v in views}
    spec = rec.spec or {}
    model = spec.get("model") or "command"
    queues = _job_queues(client, rec)
    depth = depths(client, sorted({q for v in views for q in v.queues} | set(queues)))
    reports = []
    for queue in queues:
        q = queue_facts(queue, config.tiers, config.constraint_queues)
        verdicts = explain(q, model, facts.values(), config.hosts or {})
        reports.append(_queue_report(client, rec, q, config, verdicts, views, depth))
    gang = None
    if int(spec.get("nodes") or 1) > 1 and reports:
        capable = [c.to_dict() for c in reports[0].capable]
        served = {q for v in views if v.hostname in {c["host"] for c in capable} for q in v.queues}
        gang = gang_report(client, rec, int(spec["nodes"]), capable, served)
    search = of_job(client, rec.job_id)  # a trial: its search's line, why it stopped
    note = None
    if search is not None:
        failed = _trial_reason(client, search.search_id, rec)
        note = SearchNote(
            search.search_id, search.summary(), search.stopped, search.last_failure, failed
        )
    return WhyReport(
        rec.job_id,
        rec.name,
        rec.state,
        rec.worker,
        rec.attempts,
        rec.last_error,
        tuple(reports),
        note,
        gang,
        rec.reason,
        rec.runs,
        rec.rerun_reason,
        edges_of(client, [rec]).get(rec.job_id, ()),
        rec.cancelled_by if isinstance(rec.cancelled_by, dict) else None,
    )


def _trial_reason(client: redis.Redis, search_id: str, rec: JobRecord) -> str:
    """Why this trial failed for its search though its job succeeded ('' when it did not)."""
    from state.search import trial

    if rec.state is JobState.FAILED or rec.trial is None:  # its job's own end reason says why
        return ""
    got = trial.fetch(client, search_id, rec.trial, ("reason",))
    return got.reason if got else ""


WHY_SWEEP_MAX = 20  # a sweep's base name explains this many of its jobs, waiting ones first


def why_each(client: redis.Redis, ref: str) -> tuple[bool, list[WhyReport], str | None]:
    """``why`` for one job, or (True, ...) for each job of a sweep named by its base name (as
    cancel and requeue accept it), jobs that have not ended first; and the note on a name
    other jobs share (``fleet.query.refs.pick``)."""
    from fleet.query.refs import lookup, pick

    res = lookup(client, ref)
    if res.how != "sweep":
        picked = pick(client, ref, "why")
        return False, [why(client, picked.job_id)], picked.note
    reports = [why(client, hit.job_id) for hit in res.hits]
    reports.sort(key=lambda r: r.state.terminal)
    return True, reports[:WHY_SWEEP_MAX], None


def gang_report(
    client: redis.Redis, rec: JobRecord, nodes: int, capable: list[dict], served: set[str]
) -> dict:
    """A gang (``nodes = N``): how many live hosts qualify, which are busy and with what,
    which hold one of its seats now (state.gang), and the older gangs forming on a queue
    its hosts (``served``: their queues) serve, which its members give their hosts to."""
    gangs = Gangs(client, C.GANG_BEAT_TTL_S)
    waiting = rec.state is JobState.QUEUED
    seats = [m.host for m in gangs.members(rec.job_id)] if waiting else []
    return {
        "nodes": nodes,
        "qualify": [c["host"] for c in capable],
        "busy": {c["host"]: [j["name"] for j in c["busy_with"]] for c in capable if c["busy_with"]},
        "seats": seats,
        # a requeued gang's record keeps its last run's hosts: not where it runs now
        "hosts": rec.gang_hosts.split(",") if rec.gang_hosts and not waiting else [],
        "ended": rec.state.terminal,
        "older": _older_gangs(client, gangs, rec.job_id, served) if waiting else [],
    }


def _older_gangs(client: redis.Redis, gangs: Gangs, job_id: str, served: set[str]) -> list[dict]:
    """Gangs before ``job_id`` in the forming order, still forming on a queue of ``served``
    and holding a seat: the ones its waiting members yield to (lua/gang.lua)."""
    out = []
    for older in gangs.forming_before(job_id):
        rec = fetch(client, older, ("name", "state", "pri_queue", "spec"))
        if rec is None or rec.state is not JobState.QUEUED or rec.pri_queue not in served:
            continue
        held = len(gangs.members(older))
        nodes = int((rec.spec or {}).get("nodes") or 0)
        if 0 < held < nodes:
            out.append({"job_id": older, "name": rec.name, "seats": held, "nodes": nodes})
    return out


def gang_line(g: dict) -> str:
    """`fleet why`'s line for a gang. Pure."""
    busy = "; ".join(f"{h} busy with {', '.join(names)}" for h, names in g["busy"].items())
    line = f"gang of {g['nodes']} hosts: {len(g['qualify'])} live host(s) qualify" + (
        f" ({busy})" if busy else ""
    )
    if g["hosts"]:
        return line + f"; {'ran' if g.get('ended') else 'running'} on {', '.join(g['hosts'])}"
    held = ", ".join(g["seats"]) or "none"
    line += f"; {len(g['seats'])} of {g['nodes']} seats held now ({held})"
    older = ", ".join(
        f"{o['name']} ({o['seats']} of {o['nodes']} seats)" for o in g.get("older") or []
    )
    return line + (f"; older gang(s) forming first on its hosts: {older}" if older else "")


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
) -> QueueReport:
    tier = next((t for t in config.tiers if t.name == q.tier), None)
    by_name = {v.hostname: v for v in views}
    waiting = rec.state is JobState.QUEUED
    capable = []
    for v in verdicts:
        if not v.ok:
            continue
        view = by_name[v.hostname]
        served_first = view.queues[: view.queues.index(q.name)] if q.name in view.queues else ()
        capable.append(
            Capable(
                v.hostname,
                view.slots,
                tuple(Busy(r.job_id, r.name, r.queue) for r in view.running),
                sum(sum(depth.get(s, ())) for s in served_first),
                lacks_now(rec, q, view) if waiting else None,
            )
        )
    none_can = not capable and verdicts
    return QueueReport(
        q,
        tier,
        tuple(verdicts),
        tuple(capable),
        nearest(verdicts) if none_can else None,
        fleet_lacks(q.needs, [c for c in (host_cap(v, config) for v in views) if c])
        if none_can
        else None,
        position(client, rec.job_id, q.name, depth[q.name]) if waiting else None,
    )


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
