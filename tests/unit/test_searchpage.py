"""What the live search page draws (fleet.query.searchpage.page): the search's budget,
failures and stop reason from its record, the leaderboard `fleet results` gives, and every
trial's curve with pruned ones dimmed and the best marked."""

import json

from fleet.query import results as R
from fleet.query import searchpage
from manifest.search.config import SearchConfig
from state.jobrecord import JobState
from state.search.view import SearchView
from tests.harness.records import job_record

CONFIG = SearchConfig("loss", {}, trials=8, parallel=2, max_failures=3)


def view(**kw) -> SearchView:
    base = dict(
        search_id="s1",
        name="tune",
        config=CONFIG,
        issued=4,
        ended=3,
        counts={JobState.SUCCEEDED: 1, JobState.PRUNED: 1, JobState.FAILED: 1},
        running=1,
        stopped="",
        best_value=0.2,
        best_trial=0,
        queued=0,
    )
    return SearchView(**{**base, **kw})


def board() -> R.Leaderboard:
    curves = {0: [0.5, 0.2], 1: [0.9], 2: [], 3: [0.6]}
    states = {0: "succeeded", 1: "pruned", 2: "failed", 3: "running"}
    records = [
        job_record(
            job_id=f"j{n}",
            name=f"tune[trial={n}]",
            state=states[n],
            search="s1",
            trial=n,
            params={"lr": 0.1 * (n + 1)},
            created_at=n,
            worker="h",
        )
        for n in curves
    ]
    histories = {
        f"j{n}": [{"step": s + 1, "t": 1.0, "run": 1, "loss": v} for s, v in enumerate(vs)]
        for n, vs in curves.items()
    }
    return R.build("tune", records, histories, search={"metric": "loss", "direction": "minimize"})


def test_the_budget_failures_and_stop_reason_are_the_searchs_own():
    d = searchpage.page(view(stopped="3 trials failed in a row"), board())
    assert d["budget"] == {
        "trials": 8,
        "parallel": 2,
        "issued": 4,
        "ended": 3,
        "running": 1,
        "queued": 0,
    }
    assert d["failures"] == {"failed": 1, "max": 3} and d["stopped"] == "3 trials failed in a row"
    assert d["summary"] == view(stopped="3 trials failed in a row").summary()


def test_the_leaderboard_is_fleet_results_order_and_values():
    b = board()
    d = searchpage.page(view(), b)
    assert [r["trial"] for r in d["leaderboard"]] == [t.trial for t in b.trials] == [0, 3, 1, 2]
    assert d["leaderboard"][0]["best"] and d["leaderboard"][0]["value"] == 0.2
    assert d["leaderboard"][2]["state"] == "pruned" and d["leaderboard"][2]["params"] == {"lr": 0.2}


def test_every_trial_has_its_curve_pruned_and_failed_dimmed_the_best_marked():
    d = searchpage.page(view(), board())
    by_trial = {c["trial"]: c for c in d["curves"]}
    assert by_trial[0]["steps"] == [1, 2] and by_trial[0]["values"] == [0.5, 0.2]
    assert by_trial[0]["best"] and not by_trial[0]["dimmed"]
    assert by_trial[1]["dimmed"] and by_trial[2]["dimmed"] and not by_trial[3]["dimmed"]
    assert by_trial[2]["steps"] == []


def test_a_search_with_no_trial_records_yet_has_an_empty_board():
    d = searchpage.page(view(issued=0, ended=0, running=0), None)
    assert d["leaderboard"] == [] and d["curves"] == [] and d["budget"]["issued"] == 0


def test_the_pages_json_has_the_states_and_direction_as_strings():
    """Keys and values the page's script reads are the JobState and Direction values."""
    text = json.dumps(searchpage.page(view(), board()))
    assert "JobState" not in text and "Direction" not in text
    d = json.loads(text)
    assert d["direction"] == "minimize" and set(d["budget"]) >= {"running", "queued"}
    assert d["failures"] == {"failed": 1, "max": 3}
    assert d["counts"] == {"succeeded": 1, "pruned": 1, "failed": 1}
    assert {c["trial"]: c["state"] for c in d["curves"]} == {
        0: "succeeded",
        1: "pruned",
        2: "failed",
        3: "running",
    }
