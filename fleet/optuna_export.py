"""Write a search as an Optuna study (optuna-dashboard opens it), through Optuna's public API.

The trials come from the search's leaderboard (``fleet.query.results``), the one reading that
``fleet results``, ``plot`` and the MLflow export share: each trial's state, final value, the
metric at each step (its intermediate values), its sampled params, and when its run started
and ended (its record's ``started_at`` and ``finished_at``, so a dashboard's timeline is the
search's own). The distributions are the search's space. Each trial is built with
``optuna.trial.create_trial`` and added with ``Study.add_trial``; an export again replaces the
study, never doubles it.

Optuna is the optional ``search`` extra; without it the export says how to install it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime

from core.errors import FleetError
from fleet.query.results import Leaderboard, Trial, as_direction
from manifest.search.config import Direction, Dist
from state import history


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
    made = [
        frozen(t, board.histories.get(t.job_id, []), board.objective.metric, dists) for t in trials
    ]
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
