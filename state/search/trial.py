"""A search's trial as one value: the one decoder of its hash, ``fleet:search:<id>:trial:<n>``.

The hash is written by Lua (``lua/search_issue.lua`` makes it, ``lua/search_sync.lua`` writes
its end, ``lua/search_requeue.lua`` takes the end back) and by its worker's reports
(``SearchStore.report``, ``save_sys``); it is read here only, as the job record is read by
``state.jobrecord``: ``TrialRecord.from_hash`` decodes it, ``fetch`` / ``fetch_many`` read one
or many (pipelined HGETALL or HMGET). Field names are the stored ones (``FIELDS``).

Bad stored text never crashes a reader: a field that does not decode is left at its default
and named in ``TrialRecord.problems``, which ``fetch_many`` logs.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from core import constants as C
from state.jobrecord import JobState

log = logging.getLogger("fleet.search")


def trial_key(search_id: str, number: int) -> str:
    """The trial's hash (``state.search.store.key(sid, "trial", n)``, spelled once here)."""
    return f"{C.SEARCH_KEY}{search_id}:trial:{number}"


@dataclass(frozen=True)
class TrialRecord:
    """Trial ``number`` of search ``search_id``, as its hash says it. Values it lacks keep
    their defaults (``""``, ``None``, empty)."""

    search_id: str
    number: int
    job_id: str = ""
    params: dict = field(default_factory=dict)  # the sampled values, as Optuna gave them
    dists: dict[str, str] = field(default_factory=dict)  # param -> Optuna distribution JSON
    sys: dict = field(default_factory=dict)  # Optuna's system attrs (a pruner's rungs)
    issued_at: float | None = None
    last_step: int | None = None  # its metric's greatest step so far, as its search heard it
    last_value: float | None = None  # the metric there (nan or inf as such)
    keys: str = ""  # the numeric keys its lines printed, "a, b" (for "it printed ...")
    state: JobState | None = None  # its end for the search, once counted (None: live)
    value: float | None = None  # its final value, finite, once ended
    reason: str = ""  # why it failed for the search
    ended_at: float | None = None
    problems: tuple[str, ...] = ()  # stored fields that did not decode (left at defaults)

    @classmethod
    def from_hash(cls, search_id: str, number: int, h: dict[str, str]) -> TrialRecord:
        """Decode a stored hash (decoded to str); only the fields it holds are read."""
        values, problems = {}, []
        for name, text in h.items():
            parse = _DECODE.get(name)
            if parse is None or text in (None, ""):
                continue
            try:
                values[name] = parse(text)
            except (ValueError, TypeError):
                problems.append(name)
        return cls(search_id=search_id, number=number, **values, problems=tuple(problems))

    @property
    def ended(self) -> bool:
        return self.state is not None


def _json_object(text: str) -> dict:
    v = json.loads(text)
    if not isinstance(v, dict):
        raise ValueError(f"not a JSON object: {text[:40]}")
    return v


_DECODE: dict[str, Callable[[str], Any]] = {
    "job_id": str,
    "params": _json_object,
    "dists": _json_object,
    "sys": _json_object,
    "issued_at": float,
    "last_step": int,
    "last_value": float,
    "keys": str,
    "state": JobState,
    "value": float,
    "reason": str,
    "ended_at": float,
}
FIELDS = tuple(_DECODE)  # every stored field, by its stored name


def _str(v: str | bytes) -> str:
    return v.decode() if isinstance(v, bytes) else v


def fetch(
    client, search_id: str, number: int, fields: Sequence[str] | None = None
) -> TrialRecord | None:
    """Trial ``number`` of ``search_id`` (whole, or only ``fields``); None when it has no hash."""
    return fetch_many(client, [(search_id, number)], fields)[0]


def fetch_many(
    client, trials: Iterable[tuple[str, int]], fields: Sequence[str] | None = None
) -> list[TrialRecord | None]:
    """The trials named by (search id, number), in their order, one pipelined read: whole
    (HGETALL) or only ``fields`` (HMGET); None for one that has no hash."""
    wanted = list(trials)
    names = None if fields is None else tuple(fields)
    pipe = client.pipeline(transaction=False)
    for sid, n in wanted:
        pipe.hgetall(trial_key(sid, n)) if names is None else pipe.hmget(trial_key(sid, n), names)
    out: list[TrialRecord | None] = []
    for (sid, n), reply in zip(wanted, pipe.execute(), strict=True):
        pairs = reply.items() if names is None else zip(names, reply, strict=True)
        h = {_str(k): _str(v) for k, v in pairs if v is not None}
        out.append(TrialRecord.from_hash(sid, int(n), h) if h else None)
    bad = [t for t in out if t is not None and t.problems]
    if bad:
        log.warning(
            "%d trial record(s) have fields that do not decode, e.g. %s: %s",
            len(bad),
            trial_key(bad[0].search_id, bad[0].number),
            ", ".join(bad[0].problems),
        )
    return out
