"""Preemption through checkpoints: which running jobs an urgent waiting job may displace.

A waiting job may take the place of running jobs on a host when it cannot start there now,
only if each displaced job:

* has a priority lower than the waiting job's by at least ``PREEMPT_MARGIN``;
* can be handed back without losing work (it declares ``checkpoint``, synced before it is
  stopped, or ``preemptible = true``);
* has been preempted fewer than ``MAX_PREEMPTIONS`` times (nobody starves).

Lowest priority first, then the cheapest (a gang of N members costs N hosts' work: handing
one member back stops the whole gang, ``tasks.gang``, though it frees only this host's
share), the most recently started first (least progress since it began); then any chosen
job the others free enough without is spared, the costliest first. A waiting job displaces
anyone only after it waited ``PREEMPT_GRACE_S`` (every host that could start it at once pops
it within a BRPOP round trip, so one still waiting then found no capable free host). Pure:
the worker asks it with its pool and its running jobs (``tasks.preemption``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from routing.pool import Demand, Grant, Pool, admit, release

PREEMPT_MARGIN = 3  # 9 may displace 6 or lower; 5 (the default) may displace 2 or lower
MAX_PREEMPTIONS = 3  # a job handed back this often runs to its end
PREEMPT_GRACE_S = 2.0  # an urgent job waits this long for a free capable host first


@dataclass(frozen=True)
class Waiting:
    """The most urgent job waiting on a queue this host serves but cannot consume now."""

    job_id: str
    name: str
    priority: int
    demand: Demand
    queued_at: float
    list_key: str = ""  # the broker list its message waits in


@dataclass(frozen=True)
class Running:
    """A job running on the host, as preemption sees it."""

    job_id: str
    priority: int
    grant: Grant
    started_at: float
    handback: bool  # checkpoint or preemptible: stopping it loses no work
    preempted: int = 0
    nodes: int = 1  # a gang's member: stopping it stops the gang's N hosts

    @property
    def cost(self) -> int:
        """Hosts whose work stops with it: 1, or a gang's N (it is handed back as a whole)."""
        return max(1, self.nodes)


def eligible(
    r: Running,
    priority: int,
    *,
    margin: int = PREEMPT_MARGIN,
    max_preemptions: int = MAX_PREEMPTIONS,
) -> bool:
    return r.handback and r.preempted < max_preemptions and priority - r.priority >= margin


def victims(
    pool: Pool,
    priority: int,
    demand: Demand,
    running: Sequence[Running],
    *,
    margin: int = PREEMPT_MARGIN,
    max_preemptions: int = MAX_PREEMPTIONS,
) -> list[Running] | None:
    """The running jobs to hand back so ``demand`` starts here; [] when it fits already;
    None when no allowed set frees enough."""
    if admit(pool, demand) is not None:
        return []
    candidates = sorted(
        (
            r
            for r in running
            if eligible(r, priority, margin=margin, max_preemptions=max_preemptions)
        ),
        key=lambda r: (r.priority, r.cost, -r.started_at, r.job_id),
    )
    chosen: list[Running] = []
    freed = pool
    for r in candidates:
        chosen.append(r)
        freed = release(freed, r.grant)
        if admit(freed, demand) is not None:
            return _pruned(pool, demand, chosen)
    return None


def _pruned(pool: Pool, demand: Demand, chosen: list[Running]) -> list[Running]:
    """Drop any chosen job the others free enough without: the costliest first, then in the
    order chosen (the last chosen kept longest)."""
    keep = list(chosen)
    order = sorted(range(len(chosen)), key=lambda i: (-chosen[i].cost, i))
    for r in [chosen[i] for i in order]:
        trial = [x for x in keep if x is not r]
        freed = pool
        for x in trial:
            freed = release(freed, x.grant)
        if admit(freed, demand) is not None:
            keep = trial
    return keep


def plan(
    pool: Pool,
    waiting: Waiting,
    running: Sequence[Running],
    now: float,
    *,
    grace_s: float = PREEMPT_GRACE_S,
    margin: int = PREEMPT_MARGIN,
    max_preemptions: int = MAX_PREEMPTIONS,
) -> list[Running]:
    """The running jobs to hand back now so ``waiting`` starts here; [] when none should be
    (it has not waited its grace, it fits already, or no allowed set frees enough)."""
    if now - waiting.queued_at < grace_s:
        return []
    return (
        victims(
            pool,
            waiting.priority,
            waiting.demand,
            running,
            margin=margin,
            max_preemptions=max_preemptions,
        )
        or []
    )


def reason(waiting: Waiting) -> str:
    """What the displaced job's end mark and record say."""
    return f"preempted by {waiting.name} (priority {waiting.priority})"
