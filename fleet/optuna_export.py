"""Write a search as an Optuna study (optuna-dashboard opens it), through Optuna's public API.

The trials come from the search's leaderboard (``fleet.query.results``), the one reading that
``fleet results``, ``plot`` and the MLflow export share: each trial's state, final value, the
metric at each step (its intermediate values), its sampled params, and when its run started
and ended (its record's ``started_at`` and ``finished_at``, so a dashboard's timeline is the
search's own). The distributions are the search's space. A PBT search's member is one trial per
segment of its schedule (``segments``): its values from one exploit to the next, the metric at
those steps, its end the boundary where it was exploited (pruned: cut short, valued there) or,
for its last segment, the member's own end; the user attributes say which member and whose
checkpoint it started from, since a fixed-value trial is all Optuna can hold. Each trial is
built with ``optuna.trial.create_trial`` and added with ``Study.add_trial``; an export again
replaces the study, never doubles it.

Optuna is the optional ``search`` extra; without it the export says how to install it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import datetime

from core.errors import FleetError
from fleet.query.pbt import Population
from fleet.query.results import Leaderboard, Trial, as_direction
from manifest.search.config import Direction, Dist
from state import history
from state.jobrecord import JobState
from state.search.pbt import Member


@dataclass(frozen=True)
class Exported:
    """What one export wrote."""

    study: str
    trials: int
    replaced: bool  # an earlier export of the same name was there, and was replaced

    def to_dict(self) -> dict:
        return self.__dict__.copy()


def _optuna():
    try:
        import optuna
    except ImportError:
        raise FleetError("fleet export optuna needs Optuna: pip install 'fleet[search]'") from None
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return optuna


def when(t: float | None) -> datetime | None:
    """A record's time as Optuna keeps it (a naive local datetime, as ``datetime.now()``)."""
    return None if t is None else datetime.fromtimestamp(t)


def frozen(t: Trial, points: list[dict], metric: str, distributions: dict):
    """Optuna's FrozenTrial of one leaderboard row, with its own times."""
    from state.search.study import choice, optuna_end

    optuna = _optuna()
    state, value = optuna_end(t.state, t.value)  # the search's own study maps it so too
    ended = state.is_finished()
    params = {k: choice(v) for k, v in t.params.items() if k in distributions}
    trial = optuna.trial.create_trial(
        state=state,
        value=value,
        params=params,
        distributions={k: distributions[k] for k in params},
        user_attrs={"fleet_job_id": t.job_id, "fleet_name": t.name, "fleet_state": t.state},
        intermediate_values={int(s): v for s, v in history.values(points, metric)},
    )
    start = when(t.started_at)
    if state is not state.WAITING:
        trial.datetime_start = start or trial.datetime_start
    if ended:
        trial.datetime_complete = when(t.finished_at) or trial.datetime_complete
        if trial.datetime_start and trial.datetime_complete < trial.datetime_start:
            trial.datetime_start = trial.datetime_complete  # a clock that stepped back
    return trial


@dataclass(frozen=True)
class Part:
    """One segment of a PBT member as an Optuna trial: its values, its steps (``start`` <
    step <= ``end``, None: to the member's end) and how it ended."""

    params: dict
    start: int
    end: int | None
    state: str  # a JobState's value
    value: float | None
    attrs: dict
    started_at: float | None = None  # its segment's start (the exploit that began it)
    finished_at: float | None = None  # the exploit that ended it


def segments(t: Trial, member: Member, pop: Population) -> list[Part]:
    """Member ``member``'s schedule as one part per segment: each but the last ended by an
    exploit at the next one's step (pruned there, with the member's metric at that boundary);
    the last ends as the member did. Pure."""
    exploits = {e.step: e for e in pop.lineage(member.number)}
    segs = member.schedule
    out = []
    for i, seg in enumerate(segs):
        last = i == len(segs) - 1
        end = None if last else segs[i + 1].step
        cut = None if last else exploits.get(end)
        value = t.value if last else cut.member_value if cut else member.bounds.get(end)
        start_at = seg.at if i else t.started_at
        end_at = t.finished_at if last else cut.applied_at if cut else None
        out.append(
            Part(
                dict(seg.values),
                seg.step,
                end,
                t.state if last else JobState.PRUNED.value,
                value,
                {
                    "fleet_pbt_member": member.number,
                    "fleet_pbt_segment": i,
                    "fleet_pbt_from_step": seg.step,
                    "fleet_pbt_to_step": end if end is not None else pop.last_step,
                    "fleet_pbt_donor": seg.donor,
                    "fleet_pbt_donor_step": seg.donor_step,
                },
                start_at,
                end_at,
            )
        )
    return out


def part_trial(t: Trial, part: Part, points: list[dict], metric: str, distributions: dict):
    """Optuna's FrozenTrial of one PBT segment, from its start to the exploit that ended it."""
    steps = [
        p
        for p in points
        if (p.get("step") or 0) > part.start and (part.end is None or p["step"] <= part.end)
    ]
    row = replace(
        t,
        params=part.params,
        state=part.state,
        value=part.value,
        started_at=part.started_at,
        finished_at=part.finished_at,
    )
    trial = frozen(row, steps, metric, distributions)
    for k, v in part.attrs.items():
        trial.set_user_attr(k, v)
    return trial


def made_trials(board: Leaderboard, dists: dict) -> list:
    """Every trial to write: one per row, or for a PBT search one per member segment."""
    pop, metric = board.population, board.objective.metric
    members = {m.number: m for m in pop.members} if pop else {}
    out = []
    for t in sorted(board.trials, key=lambda t: t.trial):
        points = board.histories.get(t.job_id, [])
        m = members.get(t.trial) if pop and t.search == pop.search_id else None
        if m is None or not m.schedule:
            out.append(frozen(t, points, metric, dists))
            continue
        out += [part_trial(t, p, points, metric, dists) for p in segments(t, m, pop)]
    return out


def write(
    board: Leaderboard,
    space: Mapping[str, Dist],
    direction: Direction | str,
    name: str,
    storage_url: str,
):
    """Write ``board``'s trials (a search's, ``space`` its search space) as the study ``name``
    in ``storage_url`` (e.g. sqlite:///s.db), replacing an earlier export of it."""
    from state.search.study import distributions

    optuna = _optuna()
    dists = distributions(space)
    trials = sorted(board.trials, key=lambda t: t.trial)
    made = made_trials(board, dists)
    storage = optuna.storages.get_storage(storage_url)
    replaced = name in [s.study_name for s in optuna.study.get_all_study_summaries(storage)]
    if replaced:
        optuna.delete_study(study_name=name, storage=storage)
    study = optuna.create_study(
        storage=storage, study_name=name, direction=as_direction(direction).value
    )
    study.set_user_attr("fleet_search_id", next((t.search for t in trials if t.search), ""))
    study.set_user_attr("metric", board.objective.metric)
    study.add_trials(made)
    return Exported(name, len(made), replaced)
