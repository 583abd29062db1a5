"""What `fleet plot` draws, as plain data: every trial's learning curve, the best value so
far against the trial number, and each parameter against the final metric (pruned, failed
and cancelled trials dimmed there too, the best marked; categories in the order the search's
space declares them; a parameter no trial with a value has gets no panel). The metric axis is
logarithmic when its values span two decades or more (``log_y``). A PBT search's exploits are
marked on its members' curves (``marks``), and each value is drawn over the steps, per member
(``schedules``): the schedule PBT found.

Pure (``prepare``): the picture is drawn from this by ``fleet.plot`` and the tests check
this, not the pixels.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field

from fleet.query.pbt import Population
from fleet.query.results import Direction, Leaderboard
from state import history
from state.jobrecord import JobState
from state.search.pbt import Phase

# drawn faint: they stopped short (a trial's state is its JobState's value, equal to it)
DIMMED_STATES = frozenset({JobState.PRUNED, JobState.FAILED, JobState.CANCELLED})
LOG_SPAN = 100.0  # max/min of positive values from which the metric axis is logarithmic


@dataclass(frozen=True)
class Curve:
    """One trial's metric against its step."""

    trial: int
    name: str
    state: str
    steps: list[float]
    values: list[float]
    best: bool = False  # the leaderboard's best: highlighted
    dimmed: bool = False  # pruned (or stopped short): faint


@dataclass(frozen=True)
class ParamSeries:
    """One parameter against the final metric, over the trials with a final value."""

    name: str
    numeric: bool  # a scatter; else a strip per category (values as text)
    values: list  # the parameter's values (numbers, or category labels)
    metric: list[float]  # the final metric of the same trials
    trials: list[int]
    dimmed: list[bool] = field(default_factory=list)  # each trial stopped short (faint)
    best: list[bool] = field(default_factory=list)  # each trial is the leaderboard's best
    categories: list[str] = field(default_factory=list)  # labels in order: the space's, then seen


@dataclass(frozen=True)
class Mark:
    """An exploit on a member's curve: at ``step`` member ``trial`` (its metric ``value``
    there) took member ``donor``'s checkpoint."""

    trial: int
    step: int
    value: float | None
    donor: int


@dataclass(frozen=True)
class Schedule:
    """One value of a PBT search over the steps, per member: the schedule PBT found.
    ``members`` maps a member to its (steps, values), a step function from each step on."""

    name: str
    members: dict[int, tuple[list[int], list]]
    best: int | None = None  # the leaderboard's best member: highlighted
    numeric: bool = True


@dataclass(frozen=True)
class PlotData:
    name: str
    metric: str
    direction: Direction
    curves: list[Curve]
    finals: list[tuple[int, float, str]]  # (trial, final value, state), by trial number
    best_so_far: list[tuple[int, float]]  # (trial, best succeeded value up to it), finished trials
    params: list[ParamSeries]
    log_y: bool = False  # the metric spans decades: every metric axis is logarithmic
    marks: list[Mark] = field(default_factory=list)  # a PBT search's exploits, on the curves
    schedules: list[Schedule] = field(default_factory=list)  # each value over the steps


def _numeric(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _label(v) -> str:
    return v if isinstance(v, str) else json.dumps(v, separators=(",", ":"))


def curves_title(curves: list[Curve]) -> str:
    """The learning curves' title: how many of those drawn are faint, and why (a trial that
    failed before its first step draws no curve and is not counted). Pure."""
    faint = Counter(c.state for c in curves if c.dimmed and c.steps)
    if not faint:
        return "learning curves"
    ends = ", ".join(f"{n} {state}" for state, n in sorted(faint.items()))
    return f"learning curves ({ends}: faint)"


def best_so_far(
    finals: list[tuple[int, float, str]], direction: Direction
) -> list[tuple[int, float]]:
    """The best final value of the succeeded trials up to each trial, by trial number, from
    the first that succeeded on (a pruned or failed trial carries the best on). Pure."""
    pick = min if direction is Direction.MINIMIZE else max
    out: list[tuple[int, float]] = []
    for trial, value, state in finals:
        if state == JobState.SUCCEEDED:
            out.append((trial, value if not out else pick(out[-1][1], value)))
        elif out:
            out.append((trial, out[-1][1]))
    return out


def spans_decades(values: list[float]) -> bool:
    """Positive values whose largest is ``LOG_SPAN`` times their smallest or more. Pure."""
    return bool(values) and min(values) > 0 and max(values) / min(values) >= LOG_SPAN


def declared_order(space: dict | None, name: str) -> list[str]:
    """The labels of a categorical parameter's choices, in the order its space lists them."""
    choices = ((space or {}).get(name) or {}).get("choices")
    return [_label(c) for c in choices] if isinstance(choices, list) else []


def param_series(board: Leaderboard, space: dict | None = None) -> list[ParamSeries]:
    """Each parameter against the final metric; numeric when every value is a number. A
    parameter no trial with a value has is left out (no empty panel). Pure."""
    ranked = sorted((t for t in board.trials if t.value is not None), key=lambda t: t.trial)
    keys = list(dict.fromkeys(k for t in ranked for k in t.params))
    out = []
    for key in keys:
        have = [t for t in ranked if key in t.params]
        numeric = all(_numeric(t.params[key]) for t in have)
        values = [t.params[key] if numeric else _label(t.params[key]) for t in have]
        seen = set(values) if not numeric else set()
        order = [c for c in declared_order(space, key) if c in seen]
        out.append(
            ParamSeries(
                key,
                numeric,
                values,
                [t.value for t in have],
                [t.trial for t in have],
                [t.state in DIMMED_STATES for t in have],
                [t.best for t in have],
                [] if numeric else list(dict.fromkeys([*order, *values])),
            )
        )
    return out


def marks(pop: Population | None) -> list[Mark]:
    """Every exploit, where it happened on its member's curve. Pure."""
    return [Mark(e.member, e.step, e.member_value, e.donor) for e in (pop.exploits if pop else ())]


def schedules(pop: Population | None, best: int | None = None) -> list[Schedule]:
    """Each value of the space over the steps, per member: from each segment's step to the
    next, the last one to the member's end (``last_step`` once done, else its latest step).
    Pure."""
    if pop is None:
        return []
    keys = list(dict.fromkeys(k for m in pop.members for s in m.schedule for k in s.values))
    out = []
    for key in keys:
        series: dict[int, tuple[list[int], list]] = {}
        for m in pop.members:
            segs = [s for s in m.schedule if key in s.values]
            if not segs:
                continue
            end = pop.last_step if m.phase is Phase.DONE else max(m.step or 0, segs[-1].step)
            steps = [s.step for s in segs] + [end]
            values = [s.values[key] for s in segs]
            series[m.number] = (steps, values + values[-1:])
        numeric = all(_numeric(v) for _, vs in series.values() for v in vs)
        if not numeric:
            series = {n: (st, [_label(v) for v in vs]) for n, (st, vs) in series.items()}
        out.append(Schedule(key, series, best, numeric))
    return out


def prepare(board: Leaderboard, space: dict | None = None) -> PlotData:
    """Everything the picture shows of a leaderboard (``space``: its search's, for the order
    of categories). Pure."""
    metric = board.objective.metric
    curves = []
    for t in sorted(board.trials, key=lambda t: t.trial):
        series = history.values(board.histories.get(t.job_id, []), metric)
        curves.append(
            Curve(
                t.trial,
                t.name,
                t.state,
                [s for s, _ in series],
                [v for _, v in series],
                best=t.best,
                dimmed=t.state in DIMMED_STATES,
            )
        )
    finals = [
        (t.trial, t.value, t.state)
        for t in sorted(board.trials, key=lambda t: t.trial)
        if t.value is not None
    ]
    return PlotData(
        board.name,
        metric,
        board.objective.direction,
        curves,
        finals,
        best_so_far(finals, board.objective.direction),
        param_series(board, space),
        spans_decades([v for c in curves for v in c.values] + [v for _, v, _ in finals]),
        marks(board.population),
        schedules(board.population, board.best.trial if board.best else None),
    )
