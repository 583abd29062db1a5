"""Feasibility at publish: warn when no live worker can serve a job's queue.

Publish still queues such jobs (a host may come later); this says which jobs, which
queue, and the nearest live host with what it lacks. Cheap for big sweeps: verdicts are
computed once per queue, not per job. Hosts come from worker heartbeats (tasks/heartbeat.py);
their capability is judged under the manifest being published (its tiers and policies),
not by the queues they consume now: need queues new in this publish are picked up later.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass

import redis

from fleet.query.hosts import HostView, live_hosts
from manifest.schema import Manifest, Needs
from routing.explain import HostFacts, QueueFacts, Verdict, explain, fleet_lacks, nearest
from routing.tiers import Constraint, route
from state.cluster import ClusterConfig


@dataclass(frozen=True)
class Infeasible:
    """No live host can serve ``queue`` (nor the job's fallback queue, if it has one)."""

    queue: str
    jobs: tuple[str, ...]  # job names, in manifest order
    nearest: Verdict | None  # None: no live host at all
    missing: str | None = None  # what no live host has, for a multi-GPU queue
    gang: bool = False  # hosts can serve the queue, but fewer than the gang's nodes

    def message(self, show: int = 3, dry_run: bool = False) -> str:
        if self.gang:
            return (
                f"gang {self.jobs[0]} in queue {self.queue} cannot start yet: {self.missing}. "
                f"{'Publishing would queue it' if dry_run else 'Queued'} anyway: "
                "it starts when that many hosts are live"
            )
        names = ", ".join(self.jobs[:show]) + (
            f" and {len(self.jobs) - show} more" if len(self.jobs) > show else ""
        )
        where = (
            self.missing
            if self.missing
            else f"nearest host {self.nearest.hostname}: {'; '.join(self.nearest.reasons)}"
            if self.nearest
            else "no live workers (no heartbeat in Redis)"
        )
        return (
            f"no live worker can run {len(self.jobs)} job(s) in queue {self.queue} ({names}); "
            f"{where}. {'Publishing would queue them' if dry_run else 'Queued'} anyway: "
            "they start when such a host joins"
        )

    def to_dict(self) -> dict:
        d = {
            "queue": self.queue,
            "jobs": len(self.jobs),
            "nearest_host": self.nearest.hostname if self.nearest else None,
            "shortfall": list(self.nearest.reasons) if self.nearest else [],
        }
        if self.gang:
            return {**d, "gang_short_of_hosts": self.missing}
        return {**d, "no_live_host_has": self.missing} if self.missing else d


def _queue_facts(manifest: Manifest, rows) -> dict[str, tuple[QueueFacts, str]]:
    """Each queue the rows use (main and fallback), with the model of the first job routed
    there: one job is routed per queue."""
    floors = {t.name: t.floor for t in manifest.tiers}
    out: dict[str, tuple[QueueFacts, str]] = {}
    for row in rows:
        if row.queue in out and (not row.fallback_queue or row.fallback_queue in out):
            continue
        r = route(row.job, manifest.tiers, manifest.hosts)
        for tier, queue, c in (
            (r.tier, r.queue, r.constraint),
            (r.fallback_tier, r.fallback_queue, r.fallback_constraint),
        ):
            if queue and queue not in out:
                needs = c.needs if c is not None and c.needs is not None else floors[tier]
                out[queue] = (QueueFacts(queue, tier, needs, c), row.job.kind)
    return out


def infeasible(rows: Iterable, manifest: Manifest, hosts: list[HostFacts]) -> list[Infeasible]:
    """Pure: the queues of rows to publish that no host could serve, most jobs first."""
    rows = [r for r in rows if r.action == "publish"]
    facts = _queue_facts(manifest, rows)
    verdicts = {q: explain(f, model, hosts, manifest.hosts) for q, (f, model) in facts.items()}
    ok = {q: any(v.ok for v in vs) for q, vs in verdicts.items()}
    stuck: dict[str, list[str]] = {}
    for row in rows:
        if not ok[row.queue] and not (row.fallback_queue and ok[row.fallback_queue]):
            stuck.setdefault(row.queue, []).append(row.job.name)
    caps = [h.capability for h in hosts]
    out = [
        Infeasible(q, tuple(names), nearest(verdicts[q]), _missing(facts[q][0].needs, caps))
        for q, names in stuck.items()
    ]
    out += _short_gangs([r for r in rows if ok[r.queue]], verdicts)
    return sorted(out, key=lambda i: (-len(i.jobs), i.queue))


def _short_gangs(rows, verdicts: dict) -> list[Infeasible]:
    """Gangs (``nodes = N``) whose queue fewer than N distinct live hosts can serve: each
    member needs a host of its own, so such a gang waits for more hosts."""
    out = []
    for row in rows:
        if row.job.nodes <= 1:
            continue
        able = sorted({v.hostname for v in verdicts[row.queue] if v.ok})
        if len(able) < row.job.nodes:
            lack = (
                f"only {len(able)} live host(s) qualify ({', '.join(able)}), "
                f"and nodes = {row.job.nodes} needs that many distinct hosts"
            )
            out.append(Infeasible(row.queue, (row.job.name,), None, lack, gang=True))
    return out


def _missing(needs: Needs, caps: list) -> str | None:
    """For a multi-GPU queue, what no live host has: the nearest host alone does not say
    whether any host has that many GPUs. A single-device shortfall is plain from the
    nearest host's reasons."""
    return fleet_lacks(needs, caps) if needs.gpu_count > 1 else None


def host_facts(views: list[HostView], manifest: Manifest) -> list[HostFacts]:
    """Live hosts as the manifest's policies will cap them; what they consume is not asked."""
    config = ClusterConfig(manifest.tiers, manifest.hosts)
    return [
        HostFacts(config.effective(v.detected_cap()), None, v.asked)
        for v in views
        if v.detected_cap()
    ]


def expected_consumers(
    client: redis.Redis, manifest: Manifest, cqueues: dict[str, str]
) -> dict[str, dict[str, tuple[str, ...]]]:
    """For each queue of ``cqueues`` (publish's name -> JSON {tier, constraint}), the live
    hosts that can serve it, each with the queues its heartbeat says it consumes now."""
    views = [v for v in live_hosts(client) if v.detected_cap()]
    config = ClusterConfig(manifest.tiers, manifest.hosts)
    floors = {t.name: t.floor for t in manifest.tiers}
    out: dict[str, dict[str, tuple[str, ...]]] = {}
    for queue, raw in cqueues.items():
        d = json.loads(raw)
        c = Constraint.from_dict(d["constraint"])
        q = QueueFacts(queue, d["tier"], c.needs if c.needs is not None else floors[d["tier"]], c)
        out[queue] = {}
        for v in views:
            facts = HostFacts(config.effective(v.detected_cap()), None, v.asked)
            if explain(q, None, [facts], manifest.hosts)[0].ok:
                out[queue][v.hostname] = v.queues
    return out


def check(client: redis.Redis | None, rows, manifest: Manifest) -> list[Infeasible]:
    """Warnings for a publish (or a dry run); none when Redis cannot be read."""
    if client is None:
        return []
    try:
        views = live_hosts(client)
    except redis.RedisError:
        return []
    return infeasible(rows, manifest, host_facts(views, manifest))


def messages(warnings: list[Infeasible], dry_run: bool = False) -> list[str]:
    """Lines for a human: one per stuck queue, or one in all when no worker is live."""
    if warnings and all(w.nearest is None and not w.gang for w in warnings):
        jobs = sum(len(w.jobs) for w in warnings)
        queued = "would wait, once published," if dry_run else "queued wait"
        return [
            f"no live workers (no worker heartbeat in Redis): the {jobs} job(s) {queued} "
            "until workers start (`celery -A tasks worker`; `fleet hosts` lists them)"
        ]
    return [w.message(dry_run=dry_run) for w in warnings]


def annotate(rows: list[dict], warnings: list[Infeasible]) -> list[dict]:
    """`fleet publish --json` rows, each job to publish in a stuck queue with ``infeasible``."""
    per_job = {name: w.to_dict() for w in warnings for name in w.jobs}
    for d in rows:
        if d["action"] == "publish" and d["name"] in per_job:
            d["infeasible"] = per_job[d["name"]]
    return rows
