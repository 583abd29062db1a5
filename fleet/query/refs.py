"""What an operator's job reference names: a full ID, an ID prefix, a name, a sweep, a glob.

``resolve`` wants exactly one job and says why when it gets none or several (too short
a prefix, an ambiguous prefix, a sweep name); ``match`` takes every job a list of
references names (cancel and requeue of a whole sweep). The decisions are pure
(``decide``) and tested by tables; the Redis reads are two small functions.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from core import constants as C
from core.errors import AmbiguousJob, JobNotFound
from core.ids import short_id
from fleet.query.jobs import is_glob, name_matches
from state.jobrecord import JOB_KEY_PREFIX, fetch, job_key

HEX = re.compile(r"^[0-9a-f]+$")
SHOW_CANDIDATES = 8


@dataclass(frozen=True)
class Hit:
    job_id: str
    name: str


@dataclass(frozen=True)
class Resolution:
    """What one reference matched, and how (``how``: id, prefix, name, sweep, glob, none)."""

    ref: str
    hits: tuple[Hit, ...]
    how: str
    note: str = ""  # why nothing matched, when nothing did


def decide(
    ref: str, names: dict[str, str], prefix_hits: list[str] | None, exists: bool = False
) -> Resolution:
    """Pure: what ``ref`` names, given the names index (name -> id) and the IDs that
    start with ``ref`` (None when ``ref`` cannot be an ID prefix)."""
    by_id = {jid: n for n, jid in names.items()}
    if exists or (prefix_hits is not None and ref in prefix_hits):
        return Resolution(ref, (Hit(ref, by_id.get(ref, ref)),), "id")
    if ref in names:
        return Resolution(ref, (Hit(names[ref], ref),), "name")
    if prefix_hits:
        return Resolution(
            ref, tuple(Hit(j, by_id.get(j, j)) for j in sorted(prefix_hits)), "prefix"
        )
    matched = tuple(Hit(jid, n) for n, jid in sorted(names.items()) if name_matches(n, ref))
    if matched:
        return Resolution(ref, matched, "glob" if is_glob(ref) else "sweep")
    note = f"no job name matches the glob {ref!r}" if is_glob(ref) else f"no job named {ref!r}"
    if HEX.match(ref) and len(ref) < C.MIN_ID_PREFIX:
        note += (
            f", and {ref!r} is too short for an ID prefix "
            f"(give at least {C.MIN_ID_PREFIX} characters)"
        )
    elif HEX.match(ref):
        note += " or with an ID starting with it"
    return Resolution(ref, (), "none", note + "; see `fleet status` for names and IDs")


def _candidates(hits: tuple[Hit, ...]) -> str:
    shown = ", ".join(f"{short_id(h.job_id)} {h.name}" for h in hits[:SHOW_CANDIDATES])
    more = f", and {len(hits) - SHOW_CANDIDATES} more" if len(hits) > SHOW_CANDIDATES else ""
    return shown + more


def one(res: Resolution) -> str:
    """The single job ID a resolution names, or an error saying why not and what to type."""
    if len(res.hits) == 1:
        return res.hits[0].job_id
    if not res.hits:
        raise JobNotFound(res.note)
    what, fix = {
        "prefix": (f"ID prefix {res.ref!r} matches {len(res.hits)} jobs", "give a longer prefix"),
        "sweep": (
            f"{res.ref!r} names a sweep of {len(res.hits)} jobs",
            f"name one job, e.g. {res.hits[0].name!r}, or give its ID",
        ),
        "glob": (f"{res.ref!r} matches {len(res.hits)} jobs", "name one job, or give its ID"),
    }[res.how]
    raise AmbiguousJob(f"{what}: {_candidates(res.hits)}; {fix}")


# --- reading Redis ------------------------------------------------------------------
def names_index(client) -> dict[str, str]:
    return client.hgetall(C.NAMES_INDEX)


def _prefix_hits(client, ref: str) -> list[str] | None:
    if not HEX.match(ref) or len(ref) < C.MIN_ID_PREFIX:
        return None
    keys = client.scan_iter(match=job_key(ref) + "*", count=5000)
    return sorted({k[len(JOB_KEY_PREFIX) :] for k in keys})


def lookup(client, ref: str, names: dict[str, str] | None = None) -> Resolution:
    exists = fetch(client, ref, ("job_id",)) is not None
    names = names_index(client) if names is None else names
    if exists or ref in names:
        return decide(ref, names, None, exists)
    return decide(ref, names, _prefix_hits(client, ref))


def resolve(client, ref: str) -> str:
    """One job's ID from any reference; AmbiguousJob / JobNotFound say why not."""
    return one(lookup(client, ref))


@dataclass(frozen=True)
class Picked:
    """The one job a reference names, and a note when its name is shared by other jobs."""

    job_id: str
    note: str | None = None


def pick(client, ref: str, verb: str) -> Picked:
    """Like ``resolve``; a name that other jobs share too (an edited job keeps its name and
    gets a new ID) also says which one ``verb`` picked and how to reach the others."""
    res = lookup(client, ref)
    jid = one(res)
    if res.how != "name":
        return Picked(jid)
    return Picked(jid, shared_name_note(ref, jid, same_name(client, ref, jid), verb))


def shared_name_note(name: str, picked: str, others: list[str], verb: str) -> str | None:
    """Pure: what to tell the operator when ``others`` are named ``name`` too."""
    if not others:
        return None
    shown = ", ".join(f"`fleet {verb} {short_id(o)}`" for o in others[:SHOW_CANDIDATES])
    more = f" and {len(others) - SHOW_CANDIDATES} more" if len(others) > SHOW_CANDIDATES else ""
    return (
        f"note: {len(others) + 1} jobs are named {name!r}; this is {short_id(picked)}, "
        f"the one published last; for the other{'s' if len(others) > 1 else ''}: {shown}{more}"
    )


def same_name(client, name: str, picked: str) -> list[str]:
    """The other jobs whose record has ``name``, newest first (the jobs index read in a few
    script calls: one command per job took 4 s for 100,000 jobs)."""
    from state.bulk import Bulk

    ids = client.zrevrange(C.JOBS_INDEX, 0, -1)
    return [jid for jid, n in Bulk(client).names(ids).items() if n == name and jid != picked]


@dataclass(frozen=True)
class Matches:
    """Every job a list of references names, in order, each once."""

    resolutions: list[Resolution]
    hits: list[Hit] = field(default_factory=list)

    @property
    def unmatched(self) -> list[Resolution]:
        return [r for r in self.resolutions if not r.hits]


def match(client, refs: list[str]) -> Matches:
    names = names_index(client)
    resolutions = [lookup(client, ref, names) for ref in refs]
    seen: dict[str, Hit] = {}
    for res in resolutions:
        for hit in res.hits:
            seen.setdefault(hit.job_id, hit)
    return Matches(resolutions, list(seen.values()))
