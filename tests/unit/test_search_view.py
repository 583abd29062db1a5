"""A search's one-line summary (`fleet status`, `fleet why`): running and queued apart, and
a wording that fits the terminal's width."""

import pytest

from manifest.search.config import SearchConfig
from state.jobrecord import JobState
from state.search.view import SearchView


def a_search(stopped: str = "", queued: int = 2) -> SearchView:
    return SearchView(
        search_id="sid",
        name="tune-mlp",
        config=SearchConfig("valid_loss", {}, trials=64),
        issued=45,
        ended=37,
        counts={JobState.SUCCEEDED: 25, JobState.PRUNED: 12},
        running=8,
        queued=queued,
        stopped=stopped,
        best_value=0.081,
        best_trial=23,
    )


def test_a_search_line_says_running_and_queued_apart():
    assert a_search().summary() == (
        "tune-mlp: search 37/64, 6 running, 2 queued, 12 pruned, best valid_loss=0.081 (trial 23)"
    )
    assert "8 running, 12 pruned" in a_search(queued=0).summary()


@pytest.mark.parametrize(
    "width, best",
    [
        (120, "best valid_loss=0.081 (trial 23)"),
        (80, "best 0.081 (trial 23)"),
        (74, "best 0.081 (#23)"),
    ],
)
def test_a_search_line_fits_the_width_by_a_shorter_wording_of_its_best(width, best):
    line = a_search().summary(width)
    assert line.endswith(", " + best)
    assert len(line) <= max(width, 72)


def test_a_stopped_search_gives_its_reason_a_line_of_its_own_when_it_does_not_fit():
    why = "5 trials failed in a row (max_failures=5); the last: job x exited with status 1"
    head, reason = a_search(why).summary(80).split("\n")
    assert len(head) <= 80 and reason == f"  stopped: {why}"
    assert a_search("budget").summary(200).endswith("(trial 23); stopped: budget")


def test_a_search_line_without_its_name_for_a_list_that_shows_the_name_beside_it():
    """The Searches page shows each name as its link: 'tune: tune: search ...' said it twice."""
    assert a_search().summary(named=False) == (
        "search 37/64, 6 running, 2 queued, 12 pruned, best valid_loss=0.081 (trial 23)"
    )
