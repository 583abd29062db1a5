"""A PBT search's population as plain data, for `fleet results` (each member's lineage), `fleet
why` (the exploits, what each member is doing), `fleet plot` and the exports (each value over
the steps) and Flower's search page: one source for all of them.

Read through ``state.search.pbt``'s decoder (``read``); everything after the read is pure and
tested by tables: an exploit's line (``lineage_line``), a member's lineage and what it is doing
(``doing``), the population's ``fleet why`` lines and its JSON (``to_dict``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import redis

from manifest.search.config import SearchConfig
from manifest.search.pbt import PbtConfig
from manifest.search.spec import trial_job_id
from state.jobrecord import JobState, fetch_many
from state.search.pbt import Exploit, Member, Phase, Segment, fetch_exploits, fetch_members


@dataclass(frozen=True)
class Population:
    """A PBT search's members and every exploit applied, in the order applied."""

    search_id: str
    metric: str
    last_step: int
    pbt: PbtConfig
    members: tuple[Member, ...]
    exploits: tuple[Exploit, ...]
    queued: frozenset[int] = frozenset()  # members whose job waits in a queue (not running)

    def member(self, number: int) -> Member | None:
        return next((m for m in self.members if m.number == number), None)

    def lineage(self, number: int) -> list[Exploit]:
        """Member ``number``'s exploits, in the order applied."""
        return [e for e in self.exploits if e.member == number]


# --- pure parts -------------------------------------------------------------------
def num(v: Any) -> str:
    """A value as a person reads it: 4 significant digits for a float."""
    return f"{v:.4g}" if isinstance(v, float) else str(v)


def lineage_line(e: Exploit) -> str:
    """``step 20: took member 3's checkpoint (step 23), lr 0.0012 -> 0.00144, momentum 0.9 ->
    0.72 (resampled)``: one exploit, as `fleet results` shows it. Pure."""
    ckpt = e.checkpoint_step
    at = f" (step {ckpt})" if ckpt is not None and ckpt != e.step else ""
    changes = [
        f"{k} {num(e.old.get(k))} -> {num(v)}" + (" (resampled)" if k in e.resampled else "")
        for k, v in e.new.items()
        if e.old.get(k) != v or k in e.resampled
    ]
    return ", ".join([f"step {e.step}: took member {e.donor}'s checkpoint{at}", *changes])


def lineages(pop: Population) -> dict[int, list[str]]:
    """Each member's lineage lines, by member number (a member that never exploited: none).
    Pure."""
    return {m.number: [lineage_line(e) for e in pop.lineage(m.number)] for m in pop.members}


def doing(m: Member, pop: Population, now: float | None = None) -> str:
    """What member ``m`` is doing, in a few words: ``training toward step 30 (at step 20:
    loss=0.42)``, ``stopping to take member 2's checkpoint (step 20, 3 s)``, ``queued to resume
    at step 23 from member 2's checkpoint (3 s)``, ``done at step 100``; the seconds: how long
    it has been so, when ``now`` is given. Pure."""
    age = f", {now - m.since:.0f} s" if now is not None and m.since is not None else ""
    if m.phase is Phase.DONE:
        return f"done at step {pop.last_step}"
    if m.phase is Phase.EXPLOITING:
        p = m.pending or {}
        return f"stopping to take member {p.get('donor')}'s checkpoint (step {p.get('step')}{age})"
    if m.phase is Phase.WAITING:
        mine = pop.lineage(m.number)
        whose = f" from member {mine[-1].donor}'s checkpoint" if mine else ""
        return f"queued to resume at step {m.resume_step}{whose}" + (f" ({age[2:]})" if age else "")
    nxt = pop.pbt.boundary_at_or_below(m.step or 0) + pop.pbt.interval
    toward = nxt if nxt < pop.last_step else pop.last_step
    # a queued member waits for a host: its first run, or its turn while the hosts are fewer
    what = "queued to train" if m.number in pop.queued else "training"
    if m.step is None:
        return f"{what} toward step {toward}"
    value = "" if m.value is None else f": {pop.metric}={m.value:.4g}"
    return f"{what} toward step {toward} (at step {m.step}{value})"


def why_lines(pop: Population, now: float | None = None) -> list[str]:
    """`fleet why`'s lines for a PBT search: the exploits counted, then one line per member.
    Pure."""
    by_phase: dict[Phase, int] = {}
    for m in pop.members:
        by_phase[m.phase] = by_phase.get(m.phase, 0) + 1
    phases = ", ".join(f"{by_phase[p]} {p.value}" for p in Phase if by_phase.get(p))
    n = len(pop.exploits)
    out = [
        f"  population: {len(pop.members)} members ({phases})",
        f"  exploits: {n} applied (judged every {pop.pbt.interval} steps to {pop.last_step})",
    ]
    for m in pop.members:
        count = f"; {m.exploits} exploit{'s' * (m.exploits != 1)}" if m.exploits else ""
        out.append(f"  member {m.number}: {doing(m, pop, now)}{count}")
    return out


def schedule_dict(schedule: Sequence[Segment]) -> list[dict]:
    return [
        {
            "step": s.step,
            "values": dict(s.values),
            "donor": s.donor,
            "donor_step": s.donor_step,
            "at": s.at,
        }
        for s in schedule
    ]


def exploit_dict(e: Exploit) -> dict:
    """An exploit as `--json` gives it, with its lineage line. Pure."""
    return {
        "member": e.member,
        "step": e.step,
        "donor": e.donor,
        "checkpoint_step": e.checkpoint_step,
        "old": dict(e.old),
        "new": dict(e.new),
        "resampled": list(e.resampled),
        "member_value": e.member_value,
        "donor_value": e.donor_value,
        "decided_at": e.decided_at,
        "applied_at": e.applied_at,
        "text": lineage_line(e),
    }


def member_dict(m: Member, pop: Population, now: float | None = None) -> dict:
    """A member as `--json` and Flower give it: its phase and what it is doing, its values now,
    its schedule and its lineage. Pure."""
    return {
        "member": m.number,
        "phase": m.phase.value,
        "doing": doing(m, pop, now),
        "step": m.step,
        "value": m.value,
        "values": dict(m.values),
        "exploits": m.exploits,
        "bounds": {str(s): v for s, v in sorted(m.bounds.items())},
        "schedule": schedule_dict(m.schedule),
        "lineage": [exploit_dict(e) for e in pop.lineage(m.number)],
    }


def to_dict(pop: Population, now: float | None = None) -> dict:
    """The population as plain JSON-able data. Pure."""
    return {
        "search_id": pop.search_id,
        "scheduler": {"name": "pbt", **pop.pbt.to_dict()},
        "last_step": pop.last_step,
        "exploits": len(pop.exploits),
        "members": [member_dict(m, pop, now) for m in pop.members],
    }


def population(
    search_id: str,
    config: SearchConfig,
    members: Sequence[Member],
    exploits: Sequence[Exploit],
    queued: Iterable[int] = (),
) -> Population | None:
    """The population of a search with ``config`` (None: not a PBT search); ``queued``: the
    members whose job is queued. Pure."""
    if config.pbt is None:
        return None
    return Population(
        search_id,
        config.metric,
        int(config.last_step or 0),
        config.pbt,
        tuple(members),
        tuple(exploits),
        frozenset(queued),
    )


# --- reading Redis ------------------------------------------------------------------
def read(client: redis.Redis, search_id: str, config: SearchConfig) -> Population | None:
    """The population of search ``search_id`` (None: ``config`` is not a PBT search's)."""
    if config.pbt is None:
        return None
    n = config.pbt.population
    records = fetch_many(client, [trial_job_id(search_id, i) for i in range(n)], ("trial", "state"))
    return population(
        search_id,
        config,
        fetch_members(client, search_id, n),
        fetch_exploits(client, search_id),
        (r.trial for r in records if r.state is JobState.QUEUED and r.trial is not None),
    )
