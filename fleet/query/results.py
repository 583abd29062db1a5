"""A leaderboard of the jobs that share a name: a search's trials, a grid sweep's points, or
any jobs named alike, best first, as plain values for `fleet results`, `plot` and `export`.

Reading is two pipelined passes (the records' fields, then the metric histories of
``state.history``), so a search of a thousand trials is a few round trips. Everything after
the read is pure and tested by tables: which metric (``objective``), each trial's values
(``trial``), the order (``rank``).

Which metric, and which way is better: ``--metric``/``--direction`` when given, else the
search's own (``state.search``, when the jobs are a search's trials), else the built-in
trainers' ``valid_loss`` when reported, else the first key the jobs reported; a direction
not given is guessed from the key's name (``accuracy`` is maximized, a loss minimized) and the
header says so.
"""

from __future__ import annotations

import difflib
import json
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from core.errors import FleetError, JobNotFound
from fleet.query import pbt, refs
from manifest.search.config import Direction
from state import history
from state.jobrecord import JobRecord, JobState, fetch_many, ran_on
from state.search import trial as trial_record
from state.search import view as searches
from state.search.trial import TrialRecord

FIELDS = (
    "job_id",
    "name",
    "state",
    "worker",
    "gang_hosts",
    "gpu",
    "gpu_s",
    "core_s",
    "created_at",
    "started_at",
    "finished_at",
    "result",
    "progress",
    "spec",
    "owner",
    "artifact",
    "search",
    "trial",
    "params",
)
READ_BATCH = 1000
KEYS_SHOWN = 12  # reported keys named in an unknown --metric error
DEFAULT_METRIC = "valid_loss"  # what the built-in trainers report each epoch
LABEL = re.compile(r"\[(?P<label>[^\[\]]*)\]$")


@dataclass(frozen=True)
class Objective:
    """The metric a leaderboard ranks by, which way is better, and where each came from."""

    metric: str
    direction: Direction
    source: str = "given"  # "given", "search", "trainer's", "first reported"
    direction_source: str = "given"

    def describe(self) -> str:
        how = (
            self.direction.value
            if self.direction_source == self.source
            else f"{self.direction.value}, {self.direction_source}"
        )
        return f"{self.metric} ({how}; {self.source})"


@dataclass(frozen=True)
class Trial:
    """One row of a leaderboard."""

    trial: int  # the search's trial number, else its place in publish order
    name: str
    job_id: str
    state: str  # a JobState's value: its record's, or its search's end (failed: no result)
    params: dict[str, Any]
    value: float | None  # its final value (docs/results.md): finite, or None
    best_value: float | None  # the best it reached at any step
    steps: int  # steps in its metric history
    host: str
    gpu_s: float = 0.0
    core_s: float = 0.0
    label: str = ""  # its sweep point as the name says it: "lr=0.1,seed=0"
    owner: str = ""
    gpus: str = ""  # as the record says them: "0:NVIDIA H100,1:NVIDIA H100"
    artifact: dict | None = None  # {uri, sha256, size} once stored
    search: str = ""  # the search it is a trial of
    best: bool = False  # the leaderboard's best
    started_at: float | None = None  # its latest run's start and end, as its record says
    finished_at: float | None = None
    hyper: dict[str, Any] = field(default_factory=dict)  # all its hyperparameters, fixed too
    reason: str = ""  # why it has no value: "no 'loss' in ...", "trial 3 exit 1: ValueError..."

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Leaderboard:
    """Trials best first; ``kind`` says what they are (search, sweep or jobs)."""

    name: str
    kind: str
    objective: Objective
    trials: list[Trial]
    histories: dict[str, list[dict]] = field(default_factory=dict)  # job_id -> folded points
    population: pbt.Population | None = None  # a PBT search's members: each trial's lineage

    @property
    def best(self) -> Trial | None:
        return next((t for t in self.trials if t.best), None)

    def summary(self) -> str:
        best = self.best
        best_text = (
            f", best {self.objective.metric}={short(best.value)} (trial {best.trial})"
            if best is not None
            else ""
        )
        counts: dict[str, int] = {}
        for t in self.trials:
            counts[t.state] = counts.get(t.state, 0) + 1
        states = ", ".join(f"{n} {s}" for s, n in sorted(counts.items(), key=lambda kv: -kv[1]))
        noun = {"search": "trial", "sweep": "sweep point"}.get(self.kind, "job")
        plural = "s" * (len(self.trials) != 1)
        return f"{self.name}: {len(self.trials)} {noun}{plural} ({states}){best_text}"

    def to_list(self) -> list[dict]:
        """Each trial as a dict; a PBT member's also with its phase, schedule and lineage."""
        members = {m.number: m for m in self.population.members} if self.population else {}
        return [
            {
                **t.to_dict(),
                "metric": self.objective.metric,
                "direction": self.objective.direction.value,
                **(
                    {"member": pbt.member_dict(members[t.trial], self.population)}
                    if self.population
                    and t.search == self.population.search_id
                    and t.trial in members
                    else {}
                ),
            }
            for t in self.trials
        ]


# --- pure parts -------------------------------------------------------------------
def short(v: float | None) -> str:
    return "" if v is None else f"{v:.4g}"


def _number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def label_of(name: str) -> str:
    """``tune[lr=0.1,seed=0]`` -> ``lr=0.1,seed=0``; a name with no brackets has none."""
    m = LABEL.search(name)
    return m.group("label") if m else ""


def varied_params(specs: Sequence[dict]) -> list[dict[str, Any]]:
    """Each job's hyperparameters and seed that differ across the jobs (a grid's axes): what
    tells the points apart. Pure."""
    values = [{**(s.get("hyper") or {}), "seed": s.get("seed", 0)} for s in specs]
    keys = sorted({k for v in values for k in v})
    varied = [k for k in keys if len({json.dumps(v.get(k), sort_keys=True) for v in values}) > 1]
    return [{k: v[k] for k in varied if k in v} for v in values]


# a point's step and bookkeeping, and the step keys a line may carry (``epochs``: a budget)
NOT_METRICS = frozenset(
    {"step", "t", "run", *history.STEP_KEYS, *(k + "s" for k in history.STEP_KEYS)}
)


def reported_keys(points: Iterable[dict]) -> list[str]:
    """Metric keys in the order first seen, without steps and bookkeeping. Pure."""
    seen: dict[str, None] = {}
    for p in points:
        seen.update({k: None for k, v in p.items() if k not in NOT_METRICS and _number(v)})
    return list(seen)


def objective(
    points: Iterable[dict],
    *,
    metric: str | None = None,
    direction: Direction | str | None = None,
    search: dict | None = None,
) -> Objective:
    """Which metric ranks and which way: given, else the search's, else the trainers' default
    if reported, else the first reported key. Pure."""
    if metric:
        source = "given"
    elif search and search.get("metric"):
        metric, source = str(search["metric"]), "search"
    else:
        keys = reported_keys(points)
        if not keys:  # nothing printed a metric line yet: rank by the trainers' key, all empty
            metric, source = DEFAULT_METRIC, "none reported yet"
        else:
            metric, source = (
                (DEFAULT_METRIC, "trainer's")
                if DEFAULT_METRIC in keys
                else (keys[0], "first reported")
            )
    if direction:
        return Objective(metric, as_direction(direction), source, "given")
    if search and search.get("direction") and source == "search":
        return Objective(metric, as_direction(search["direction"]), source, "search")
    return Objective(metric, Direction.guess(metric), source, "guessed")


def as_direction(d: Direction | str) -> Direction:
    """A direction as given: the enum as is, a name (``--direction``) parsed."""
    return d if isinstance(d, Direction) else Direction.parse(d)


def _from_record(record: JobRecord, metric: str) -> float | None:
    """The metric from the record when there is no history: its result, else its progress
    (a NaN or infinity as the record keeps it: "nan", "inf", "-inf")."""
    for part in (record.result, record.progress):
        v = ((part or {}).get("metrics") or {}).get(metric)
        if isinstance(v, str) and v in history.NON_FINITE:
            return history.NON_FINITE[v]
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            return float(v)
    return None


def final_value(
    record: JobRecord, points: list[dict], metric: str, final: TrialRecord | None = None
) -> tuple[float | None, str]:
    """A job's final value and, when it has none, why (docs/results.md). A search's ended
    trial has the one its search wrote when it counted its end (``final``, its trial record,
    read by ``search_finals``; given only when ``metric`` is its search's); any other job the
    metric at its last step that reported it, else its result's. A NaN or an infinity is no
    value: "ended with loss=nan". Pure."""
    if final is not None and final.ended:
        return final.value, final.reason
    value = history.final(points, metric)
    if value is None:
        value = _from_record(record, metric)
    if value is None:
        return None, ""
    if not math.isfinite(value):
        return None, f"ended with {metric}={value}, not a result"
    return value, ""


def trial(
    record: JobRecord,
    points: list[dict],
    obj: Objective,
    *,
    number: int,
    params: dict,
    final: TrialRecord | None = None,
    value_of_search: bool = True,
) -> Trial:
    """One leaderboard row from a job's record and its folded history; ``final``: its trial
    record when it is a search's, whose end (a state, and a value when ``value_of_search``:
    ``obj`` ranks by the search's metric) it takes. Pure."""
    ended = final if final is not None and final.ended else None
    series = history.values(points, obj.metric)
    value, reason = final_value(record, points, obj.metric, ended if value_of_search else None)
    pick = min if obj.direction is Direction.MINIMIZE else max
    best_value = pick(v for _, v in series) if series else value
    # a trial's state for its search: failed when its job succeeded without a result
    state = ended.state if ended is not None else record.state
    return Trial(
        trial=record.trial if record.trial is not None else number,
        name=record.name or record.job_id,
        job_id=record.job_id,
        state=state.value,
        params=params,
        value=value,
        best_value=best_value,
        steps=len(points),
        host=ran_on(record.worker, record.gang_hosts),
        gpu_s=record.gpu_s,
        core_s=record.core_s,
        label=label_of(record.name),
        owner=record.owner,
        gpus=record.gpu,
        artifact=record.artifact,
        search=record.search,
        # a requeued job keeps its earlier run's times until it starts again
        started_at=None if state is JobState.QUEUED else _time(record.started_at),
        finished_at=_time(record.finished_at) if state.terminal else None,
        hyper=dict((record.spec or {}).get("hyper") or {}),
        reason=reason,
    )


def _time(t: float | None) -> float | None:
    return t if t is not None and t > 0 else None


def rank(trials: Iterable[Trial], direction: Direction) -> list[Trial]:
    """Best first: succeeded trials by value, then any other with a value (running, pruned,
    failed) by value, then those with none; ties go to the better best value, then the earlier
    trial. The first row is marked best when it has a value. Pure."""
    sign = 1.0 if direction is Direction.MINIMIZE else -1.0

    def key(t: Trial) -> tuple:
        tier = 2 if t.value is None else 0 if t.state == JobState.SUCCEEDED else 1
        best = sign * t.best_value if t.best_value is not None else math.inf
        return tier, sign * t.value if t.value is not None else 0.0, best, t.trial

    ordered = sorted(trials, key=key)
    if ordered and ordered[0].value is not None:
        ordered[0] = _marked(ordered[0])
    return ordered


def _marked(t: Trial) -> Trial:
    return replace(t, best=True)


def kind_of(records: Sequence[JobRecord]) -> str:
    if any(r.search for r in records):
        return "search"
    if any(label_of(r.name) for r in records):
        return "sweep"
    return "jobs"


def build(
    name: str,
    records: Sequence[JobRecord],
    histories: dict[str, list[dict]],
    *,
    metric: str | None = None,
    direction: Direction | str | None = None,
    search: dict | None = None,
    finals: Mapping[str, TrialRecord] | None = None,
) -> Leaderboard:
    """The leaderboard of ``records`` and their folded histories; ``finals``: a search's
    trials' records by job id (``search_finals``), whose ends a trial row takes. Pure."""
    records = sorted(records, key=lambda r: (r.created_at or 0.0, r.name))
    finals = finals or {}
    # a job with no history (yet) may still have a final metric in its record
    points = [
        *(p for r in records for p in histories.get(r.job_id, [])),
        *(((r.result or {}).get("metrics") or {}) for r in records),
    ]
    obj = objective(points, metric=metric, direction=direction, search=search)
    # the value its search wrote is of the search's metric: another metric's is read here
    of_search = bool(search) and search.get("metric") == obj.metric
    varied = varied_params([r.spec for r in records])
    rows = [
        trial(
            r,
            histories.get(r.job_id, []),
            obj,
            number=i,
            params=r.params if isinstance(r.params, dict) else varied[i],
            final=finals.get(r.job_id),
            value_of_search=of_search,
        )
        for i, r in enumerate(records)
    ]
    return Leaderboard(name, kind_of(records), obj, rank(rows, obj.direction), dict(histories))


# --- reading Redis ------------------------------------------------------------------
def read_records(client, ids: Sequence[str], batch: int = READ_BATCH) -> list[JobRecord]:
    """The fields a leaderboard needs of each job's record, in pipelined batches."""
    return fetch_many(client, ids, FIELDS, batch)


def job_ids(client, name: str) -> list[str]:
    """The jobs ``name`` names: one job, a sweep or search by its base name, or a glob."""
    found = refs.lookup(client, name)
    if not found.hits:
        raise JobNotFound(found.note)
    return [h.job_id for h in found.hits]


def search_of(client, name: str, search_ids: Iterable[str]) -> dict | None:
    """The metric, direction and best of the search these jobs are trials of (``search_ids``,
    their records' ``search``, else the latest search called ``name``), or None: no search."""
    ids = sorted(set(filter(None, search_ids))) or searches.find_searches(client, name)
    for sid in ids:
        view = searches.read_search(client, sid, trials=False)
        if view is not None:
            return {
                "search_id": sid,
                "config": view.config,
                "metric": view.metric,
                "direction": view.direction,
                "best_trial": view.best_trial,
                "space": {k: v.to_dict() for k, v in view.config.space.items()},
            }
    return None


def search_finals(client, records: Sequence[JobRecord]) -> dict[str, TrialRecord]:
    """Each search trial's trial record, by job id: what its search wrote of its end (its
    state for the search, its final value and the reason it has none) once, when it counted
    it (lua/search_sync.lua); the one source of a trial's final value for `fleet results`,
    `plot` and the exports."""
    trials = [r for r in records if r.search and r.trial is not None]
    got = trial_record.fetch_many(
        client, [(r.search, r.trial) for r in trials], ("state", "value", "reason")
    )
    return {r.job_id: t for r, t in zip(trials, got, strict=True) if t is not None}


def leaderboard(
    client, name: str, *, metric: str | None = None, direction: Direction | str | None = None
) -> Leaderboard:
    """Read the jobs ``name`` names and rank them (see ``build``)."""
    records = read_records(client, job_ids(client, name))
    histories = history.read_many(client, [r.job_id for r in records])
    search = search_of(client, name, (r.search for r in records))
    finals = search_finals(client, records) if search is not None else {}
    board = build(
        name, records, histories, metric=metric, direction=direction, search=search, finals=finals
    )
    _check_metric(board, metric, records)
    if search is not None:
        board = replace(board, population=pbt.read(client, search["search_id"], search["config"]))
    return board


def _check_metric(board: Leaderboard, metric: str | None, records: Sequence[JobRecord]) -> None:
    """``--metric X`` that no job reported, while they did report others: an error with a
    did-you-mean, not a board of empty columns."""
    if not metric:
        return
    keys = reported_keys(
        [
            *(p for pts in board.histories.values() for p in pts),
            *(((r.result or {}).get("metrics") or {}) for r in records),
        ]
    )
    if keys and metric not in keys:
        close = difflib.get_close_matches(metric, keys, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise FleetError(
            f"--metric {metric!r}: no job of {board.name!r} reported it{hint} "
            f"(they reported {', '.join(keys[:KEYS_SHOWN])})"
        )
