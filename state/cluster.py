"""What publish left in Redis for workers: tiers, host policies and constraint queues."""

from __future__ import annotations

import json
from dataclasses import dataclass

import redis

from core import constants as C
from manifest.schema import HostPolicy, TierSpec
from routing.capability import Capability, restrict
from routing.tiers import DEFAULT_TIERS, Constraint, host_queues, host_tiers


@dataclass(frozen=True)
class ClusterConfig:
    tiers: tuple[TierSpec, ...] = DEFAULT_TIERS
    hosts: dict[str, HostPolicy] | None = None
    constraint_queues: dict[str, tuple[str, Constraint]] | None = None

    def policy(self, hostname: str) -> HostPolicy | None:
        return (self.hosts or {}).get(hostname)

    def effective(self, cap: Capability) -> Capability:
        """Detected capability capped by what the manifest declares for this host."""
        pol = self.policy(cap.hostname)
        return restrict(cap, pol.declared) if pol else cap

    def queues(self, cap: Capability, only: tuple[str, ...] = ()) -> list[str]:
        """Queues a host consumes, most demanding first; ``only`` (a worker's -Q) keeps just
        those tiers and the constraint queues of those tiers that admit the host."""
        cap = self.effective(cap)
        queues = host_queues(cap, self.tiers, self.policy(cap.hostname), self.constraint_queues)
        if not only:
            return queues
        cq = self.constraint_queues or {}
        return [q for q in queues if q in only or (q in cq and cq[q][0] in only)]

    def tier_reasons(self, cap: Capability) -> dict[str, str | None]:
        cap = self.effective(cap)
        return host_tiers(cap, self.tiers, self.policy(cap.hostname))


def read_config(client: redis.Redis) -> ClusterConfig:
    """The last published config, or the defaults when nothing was published yet."""
    pipe = client.pipeline(transaction=False)
    pipe.hgetall(C.CONFIG_KEY)
    pipe.hgetall(C.CQUEUES_KEY)
    conf, cq = pipe.execute()
    tiers = (
        tuple(TierSpec.from_dict(t) for t in json.loads(conf["tiers"]))
        if conf.get("tiers")
        else DEFAULT_TIERS
    )
    hosts = (
        {n: HostPolicy.from_dict(h) for n, h in json.loads(conf["hosts"]).items()}
        if conf.get("hosts")
        else {}
    )
    cqueues = {}
    for q, raw in cq.items():
        d = json.loads(raw)
        cqueues[q] = (d["tier"], Constraint.from_dict(d["constraint"]))
    return ClusterConfig(tiers, hosts, cqueues)
