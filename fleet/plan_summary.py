"""A publish plan too long to read row by row, summarised: counts per queue and per sweep.

Pure: plan rows in, plain data out. ``fleet publish`` prints this above
``SUMMARY_ABOVE_ROWS`` rows (a 100,000-row table takes minutes to render and nobody
reads it); ``--json`` still lists every row.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

SUMMARY_ABOVE_ROWS = 300  # plans longer than this are summarised
FIRST_ROWS = 20  # rows shown in full in a summary
MAX_GROUPS = 20  # queues or sweeps listed; the rest are counted in one line


@dataclass(frozen=True)
class Group:
    """Jobs sharing a queue or a sweep, counted by action (publish, skip)."""

    name: str
    jobs: int
    actions: dict[str, int]


@dataclass(frozen=True)
class PlanSummary:
    total: int
    actions: dict[str, int]
    queues: list[Group]  # largest first, at most MAX_GROUPS
    sweeps: list[Group]  # largest first, at most MAX_GROUPS
    more_queues: int  # groups left out of ``queues``
    more_sweeps: int
    first: list  # the first FIRST_ROWS PlanRows
    more_rows: int  # rows not in ``first``


def sweep_base(name: str) -> str:
    """The name a sweep's jobs share: ``gbt[seed=1,lr=0.1]`` -> ``gbt``; a plain name is its own."""
    cut = name.find("[")
    return name[:cut] if cut > 0 and name.endswith("]") else name


def _groups(keys: list[str], actions: list[str], limit: int) -> tuple[list[Group], int]:
    counts: dict[str, Counter] = {}
    for key, action in zip(keys, actions, strict=True):
        counts.setdefault(key, Counter())[action] += 1
    ordered = sorted(counts.items(), key=lambda kv: (-sum(kv[1].values()), kv[0]))
    return [Group(k, sum(c.values()), dict(c)) for k, c in ordered[:limit]], max(
        0, len(ordered) - limit
    )


def summarise(rows: Sequence, first: int = FIRST_ROWS, limit: int = MAX_GROUPS) -> PlanSummary:
    """Counts per action, per queue and per sweep, and the first rows of ``rows`` (PlanRows)."""
    actions = [r.action for r in rows]
    queues, more_q = _groups([r.queue for r in rows], actions, limit)
    sweeps, more_s = _groups([sweep_base(r.job.name) for r in rows], actions, limit)
    return PlanSummary(
        len(rows),
        dict(Counter(actions)),
        queues,
        sweeps,
        more_q,
        more_s,
        list(rows[:first]),
        max(0, len(rows) - first),
    )
