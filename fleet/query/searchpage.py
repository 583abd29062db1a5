"""What Flower's live search page draws, as plain data (the JSON its script polls).

One search: its budget (trials issued, ended, running, queued of its ``trials`` and
``parallel``), its failures against ``max_failures``, why it stopped, the leaderboard as
`fleet results` gives it (``fleet.query.results``), and every trial's learning curve as
`fleet plot` draws it (``fleet.query.plotdata``: pruned trials dimmed, the best marked). A PBT
search's page also has its population (``fleet.query.pbt``: each member's phase, what it is
doing, its lineage), its exploits marked on the curves and each value over the steps. The
page shows only what these say; ``page`` is pure and tested against the records.
"""

from __future__ import annotations

import time
from dataclasses import replace

import redis

from core.errors import JobNotFound
from fleet.query import pbt, plotdata
from fleet.query import results as R
from fleet.query.searches import summaries
from state.jobrecord import JobState
from state.search.view import SearchView, find_searches, read_search

ROW_FIELDS = ("trial", "name", "job_id", "state", "value", "best_value", "steps", "host", "best")


def page(view: SearchView, board: R.Leaderboard | None, now: float | None = None) -> dict:
    """The page's data for a search and its leaderboard (None: no trial has a record yet), read
    at ``now`` (how long a PBT member has been in its phase). Pure."""
    config = view.config
    out = {
        "name": view.name,
        "search_id": view.search_id,
        "summary": view.summary(),
        "metric": view.metric,
        "direction": view.direction.value,
        "budget": {
            "trials": config.trials,
            "parallel": config.parallel,
            "issued": view.issued,
            "ended": view.ended,
            JobState.RUNNING.value: view.running - view.queued,
            JobState.QUEUED.value: view.queued,
        },
        "counts": {s.value: n for s, n in view.counts.items()},
        "failures": {
            JobState.FAILED.value: view.counts.get(JobState.FAILED, 0),
            "max": config.max_failures,
        },
        "stopped": view.stopped,
        "done": view.done,
        "best": {"trial": view.best_trial, "value": view.best_value},
        "leaderboard": [],
        "curves": [],
        "pbt": None,
    }
    if board is None:
        return out
    out["leaderboard"] = [
        {**{k: getattr(t, k) for k in ROW_FIELDS}, "params": t.params} for t in board.trials
    ]
    drawn = plotdata.prepare(board)
    out["curves"] = [
        {
            "trial": c.trial,
            "state": c.state,
            "best": c.best,
            "dimmed": c.dimmed,
            "steps": c.steps,
            "values": c.values,
        }
        for c in drawn.curves
    ]
    if board.population is not None:
        out["pbt"] = population(board.population, drawn, now)
    return out


def population(pop: pbt.Population, drawn: plotdata.PlotData, now: float | None) -> dict:
    """A PBT search's part of the page: its members (``pbt.to_dict``), its exploits where they
    are on the curves, and each value over the steps per member. Pure."""
    return {
        **pbt.to_dict(pop, now),
        "marks": [
            {"trial": m.trial, "step": m.step, "value": m.value, "donor": m.donor}
            for m in drawn.marks
        ],
        "schedules": [
            {
                "name": s.name,
                "numeric": s.numeric,
                "best": s.best,
                "members": [
                    {"member": n, "steps": steps, "values": values}
                    for n, (steps, values) in sorted(s.members.items())
                ],
            }
            for s in drawn.schedules
        ],
    }


def leaderboard(client: redis.Redis, view: SearchView) -> R.Leaderboard | None:
    """The search's leaderboard, as `fleet results NAME` ranks it, of this search's trials only
    (jobs of other kinds may share its name)."""
    try:
        board = R.leaderboard(client, view.name, metric=view.metric, direction=view.direction)
    except JobNotFound:
        return None
    mine = [replace(t, best=False) for t in board.trials if t.search == view.search_id]
    return replace(board, trials=R.rank(mine, board.objective.direction))


def read(client: redis.Redis, name: str) -> dict | None:
    """The page's data for the search called ``name`` (its latest), or None: no such search."""
    found = find_searches(client, name)
    view = read_search(client, found[0], trials=False) if found else None
    if view is None:
        return None
    return page(view, leaderboard(client, view), time.time())


def index(client: redis.Redis) -> list[dict]:
    """Every search by name, one line each, for the page that links to them."""
    # the page shows each name as its link: the line after it does not say it again
    return [
        {"name": v.name, "summary": v.summary(named=False), "done": v.done}
        for v in summaries(client)
    ]
