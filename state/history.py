"""A job's metric history: one point per ``FLEET_METRIC`` line, kept in Redis, bounded.

Each job has one list, ``fleet:metrics:<job_id>``, of compact JSON points such as
``{"step": 3, "t": 1764072000.25, "run": 2, "train_loss": 0.41, "valid_loss": 0.45}``: the
numeric values of one metric line (a NaN or infinity as the text "nan", "inf", "-inf"), its
step (``trainers.protocol.step_of``: the one step rule), when the worker saw it, and the run
(the job's run number, as in `fleet logs`) that printed it. An append is one MULTI (RPUSH,
LTRIM), so the list never holds more than ``METRIC_HISTORY_MAX_POINTS``; like the job's
record, it has no TTL.

A run resumed from a checkpoint replays the steps after that checkpoint. The list keeps every
line as it was printed (an append is all a worker does), and readers fold it by step
(``by_step``): the points of one step merge in the order they were written, so the later
run's values replace the ones its replay repeats, and each step counts once: the last value
of a step wins, here as in a search's pruner (docs/results.md).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence

from core import constants as C

STEP_KEYS = C.METRIC_STEP_KEYS  # the step rule is trainers.protocol.step_of
READ_BATCH = 500  # jobs per pipelined read
NON_FINITE = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}  # how a point keeps them


def key(job_id: str) -> str:
    return C.METRICS_KEY + job_id


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def point(step: int, values: dict, *, t: float, run: int) -> dict:
    """The stored form of a metric line's point (``trainers.protocol.point_of``). Pure."""
    return {"step": step, "t": round(t, 3), "run": run, **values}


def by_step(points: Iterable[dict]) -> list[dict]:
    """Points folded by step, in step order: a step's points merge in the order written, the
    later value of a key winning (a resumed run's replay replaces what it repeats). Pure."""
    steps: dict = {}
    for p in points:
        step = p.get("step")
        if _number(step):
            steps[step] = {**steps.get(step, {}), **p}
    return [steps[s] for s in sorted(steps)]


def values(points: Sequence[dict], metric: str) -> list[tuple[float, float]]:
    """``(step, value)`` of one metric over folded points, finite values only. Pure."""
    return [
        (p["step"], float(p[metric]))
        for p in points
        if _number(p.get(metric)) and math.isfinite(p[metric])
    ]


def final(points: Sequence[dict], metric: str) -> float | None:
    """The metric at the last step that reported it, over folded points: a float, nan and
    infinities included (a value that is not a result is still the trial's end), else None.
    Pure."""
    for p in reversed(points):
        v = p.get(metric)
        if _number(v):
            return float(v)
        if isinstance(v, str) and v in NON_FINITE:
            return NON_FINITE[v]
    return None


def decode(raw: Iterable[str | bytes]) -> list[dict]:
    """Stored points, folded by step; an unreadable entry is skipped."""
    out = []
    for item in raw:
        try:
            p = json.loads(item)
        except ValueError:
            continue
        if isinstance(p, dict):
            out.append(p)
    return by_step(out)


def jsonl(points: Iterable[dict]) -> bytes:
    """Points as JSON Lines, one point a line (the bundle's ``metrics.jsonl``)."""
    return b"".join(json.dumps(p, separators=(",", ":")).encode() + b"\n" for p in points)


# --- Redis -------------------------------------------------------------------------
def append(
    client, job_id: str, points: Sequence[dict], max_points: int = C.METRIC_HISTORY_MAX_POINTS
) -> None:
    """Add points to a job's history and trim it to its last ``max_points``, atomically."""
    if not points:
        return
    pipe = client.pipeline(transaction=True)
    pipe.rpush(key(job_id), *(json.dumps(p, separators=(",", ":")) for p in points))
    pipe.ltrim(key(job_id), -max_points, -1)
    pipe.execute()


def read(client, job_id: str) -> list[dict]:
    """One job's history, folded by step."""
    return decode(client.lrange(key(job_id), 0, -1))


def read_many(client, job_ids: Sequence[str], batch: int = READ_BATCH) -> dict[str, list[dict]]:
    """Many jobs' histories (a search's trials), folded by step, in pipelined batches."""
    out: dict[str, list[dict]] = {}
    for start in range(0, len(job_ids), batch):
        chunk = job_ids[start : start + batch]
        pipe = client.pipeline(transaction=False)
        for jid in chunk:
            pipe.lrange(key(jid), 0, -1)
        out.update({jid: decode(raw) for jid, raw in zip(chunk, pipe.execute(), strict=True)})
    return out
