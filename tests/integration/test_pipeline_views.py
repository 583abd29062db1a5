"""What an operator sees of a pipeline, on a real Redis with the real publish and end scripts:
`fleet status` lists a waiting follower with what it waits on (and `--json` says it), `fleet
why` names the upstreams still running, queued or failed and, after a cascade, the upstream
and its reason; `fleet status --tree` draws the pipeline; `fleet show` a released follower's
params and resolved inputs."""

from __future__ import annotations

import json

import pytest

from fleet.cli.common import console
from fleet.manifests import loads
from fleet.publish import publish
from state.jobrecord import JobState, RunEnd, fetch
from state.records import Records

pytestmark = pytest.mark.integration

PIPELINE = """
[[jobs]]
name = "prep"
command = ["true"]

[[jobs]]
name = "other"
command = ["python", "-c", "pass"]

[[jobs]]
name = "train"
after = ["prep", "other"]
inputs = ["prep"]
command = ["echo", "train"]

[[jobs]]
name = "final"
after = ["train"]
command = ["echo", "final"]
"""


@pytest.fixture
def piped(app, redis_client):
    """The pipeline published: its jobs' IDs by name."""
    manifest = loads(PIPELINE, "pipe.toml")
    publish(app, redis_client, manifest)
    return {j.name: j.job_id for j in manifest.jobs}


def run(recs: Records, job_id: str, state: JobState, token: str, **fields) -> None:
    """One run of ``job_id`` by a worker, ended in ``state`` (finish.lua releases or cancels
    its followers in the same step)."""
    assert recs.claim(job_id, "w1", token, {}, "cpu").run
    assert recs.finish(job_id, token, state, **fields)


def cli_out(fleet_cli, capsys, *argv) -> str:
    capsys.readouterr()
    with console.capture() as cap:
        assert fleet_cli(list(argv)) == 0
    return cap.get() + capsys.readouterr().out


def test_status_lists_a_waiting_follower_with_the_upstreams_it_waits_on(
    piped, redis_client, fleet_cli, capsys
):
    run(Records(redis_client), piped["prep"], JobState.SUCCEEDED, "t1")
    out = cli_out(fleet_cli, capsys, "status", "--wide")
    line = next(ln for ln in out.splitlines() if ln.startswith("train"))
    assert "waiting" in line and "waits on other (queued)" in line
    assert "prep" not in line.partition("waits on")[2]  # prep succeeded: no longer awaited
    final = next(ln for ln in out.splitlines() if ln.startswith("final"))
    assert "waits on train (waiting)" in final


def test_status_json_gives_a_followers_upstreams_and_what_it_waits_on(
    piped, redis_client, fleet_cli, capsys
):
    run(Records(redis_client), piped["prep"], JobState.SUCCEEDED, "t1")
    rows = {
        r["name"]: r for r in json.loads(cli_out(fleet_cli, capsys, "status", "--json"))["jobs"]
    }
    assert rows["train"]["state"] == "waiting"
    assert rows["train"]["waits_on"] == ["other"]
    assert {(u["name"], u["state"], u["awaited"]) for u in rows["train"]["after"]} == {
        ("prep", "succeeded", False),
        ("other", "queued", True),
    }
    assert "waits_on" not in rows["prep"]


def test_why_of_a_waiting_job_names_the_upstreams_still_running_or_queued(
    piped, redis_client, fleet_cli, capsys
):
    recs = Records(redis_client)
    assert recs.claim(piped["other"], "w1", "t2", {}, "cpu").run  # running now
    out = cli_out(fleet_cli, capsys, "why", "train")
    assert "waits on prep (queued), other (running)" in out
    report = json.loads(cli_out(fleet_cli, capsys, "why", "train", "--json"))
    assert report["state"] == "waiting"
    assert report["waits_on"] == ["prep", "other"]


def test_why_of_a_cascade_cancelled_job_names_the_upstream_and_its_reason(
    piped, redis_client, fleet_cli, capsys
):
    recs = Records(redis_client)
    # attempts spent: the claim after the last attempt fails it for good, cancelling followers
    run(
        recs,
        piped["other"],
        JobState.FAILED,
        "t3",
        last_error="exit 1: ValueError: bad rows",
        end=RunEnd.FAILED.value,
        end_reason="exit 1: ValueError: bad rows",
    )
    if fetch(redis_client, piped["train"], ("state",)).state is not JobState.CANCELLED:
        pytest.skip("a failed run with attempts left is retried, not a failure for good")
    out = cli_out(fleet_cli, capsys, "why", "final")
    assert "upstream train was cancelled: upstream other failed: exit 1: ValueError" in out
    out = cli_out(fleet_cli, capsys, "why", "train")
    assert "cancelled by its pipeline: upstream other failed: exit 1: ValueError: bad rows" in out
    assert "fleet requeue other" in out


def test_status_tree_draws_the_pipeline_with_each_steps_state(
    piped, redis_client, fleet_cli, capsys
):
    run(Records(redis_client), piped["prep"], JobState.SUCCEEDED, "t1")
    out = cli_out(fleet_cli, capsys, "status", "--tree")
    lines = [ln.rstrip() for ln in out.splitlines() if ln.strip()]
    # roots by name: other first, so train (after both) is drawn whole under it
    assert lines[0].startswith("other") and "queued" in lines[0], lines
    assert lines[1].startswith("└─ train") and "waiting" in lines[1], lines
    assert lines[2].startswith("   └─ final") and "waiting" in lines[2], lines
    assert lines[3].startswith("prep") and "succeeded" in lines[3], lines
    assert lines[4].startswith("└─ train") and "(drawn above)" in lines[4], lines
    assert all(len(ln) <= 80 for ln in lines)
    tree = json.loads(cli_out(fleet_cli, capsys, "status", "--tree", "--json"))
    by_name = {n["name"]: n for n in tree["nodes"]}
    assert by_name["final"]["after"] == [f"job:{piped['train']}"]
    assert set(tree["roots"]) == {f"job:{piped['prep']}", f"job:{piped['other']}"}


def test_show_of_a_released_follower_gives_its_resolved_inputs(
    piped, redis_client, fleet_cli, capsys
):
    recs = Records(redis_client)
    run(recs, piped["prep"], JobState.SUCCEEDED, "t1")
    run(recs, piped["other"], JobState.SUCCEEDED, "t2")
    assert fetch(redis_client, piped["train"], ("state",)).state is JobState.QUEUED
    out = cli_out(fleet_cli, capsys, "show", "train")
    assert f"prep/ <- {piped['prep'][:12]}" in out or f"prep/ <- {piped['prep'][:8]}" in out
    assert "released" in out and "by other" in out


def test_flower_lists_a_waiting_follower_as_pending_with_what_it_waits_for(piped, redis_client):
    from flower.events import EventsState

    from fleet import flower_view as view
    from fleet.flower_extras import seed_tasks

    class State(EventsState):
        Task = view.FleetTask  # as fleet.flower_extras installs it

    run(Records(redis_client), piped["prep"], JobState.SUCCEEDED, "t1")
    state = State(max_tasks_in_memory=100)
    seed_tasks(state, redis_client, 100)
    train = state.tasks[piped["train"]]
    assert (train.state, train.waits) == ("PENDING", "other (queued)")
    assert train.as_dict()["waits"] == "other (queued)"  # what the Tasks table sends the page
    assert state.tasks[piped["final"]].waits == "train (waiting)"


def test_flowers_waits_for_cell_follows_the_record_once_its_job_is_released(
    piped, redis_client, monkeypatch
):
    from types import SimpleNamespace

    from fleet import flower_extras

    monkeypatch.setattr(flower_extras, "WAITS_EVERY_S", 0.0)  # read again at every draw
    page = SimpleNamespace(_fleet_redis=redis_client)  # Flower's application, as _client reads it
    recs = Records(redis_client)
    assert flower_extras.waits_of(page, piped["train"]) == "prep (queued), other (queued)"
    run(recs, piped["prep"], JobState.SUCCEEDED, "t1")
    assert flower_extras.waits_of(page, piped["train"]) == "other (queued)"
    run(recs, piped["other"], JobState.SUCCEEDED, "t2")
    assert flower_extras.waits_of(page, piped["train"]) == ""  # queued now: it waits on nothing


SEARCH_PIPELINE = """
[[jobs]]
name = "sprep"
command = ["true"]

[[jobs]]
name = "stune"
after = ["sprep"]
command = ["echo", "tune"]
[jobs.search]
trials = 2
parallel = 1
metric = "loss"
direction = "minimize"
[jobs.search.space]
lr = { low = 0.001, high = 0.1, log = true }

[[jobs]]
name = "sfinal"
params_from = "stune"
command = ["echo", "final"]
"""


def test_a_search_that_follows_says_what_it_waits_on_and_its_follower_waits_on_it(
    app, redis_client, fleet_cli, capsys
):
    manifest = loads(SEARCH_PIPELINE, "spipe.toml")
    publish(app, redis_client, manifest)
    out = cli_out(fleet_cli, capsys, "status", "--wide")
    search_line = next(ln for ln in out.splitlines() if ln.startswith("stune"))
    assert "waits on sprep (queued)" in search_line
    final = next(ln for ln in out.splitlines() if ln.startswith("sfinal"))
    assert "waits on stune (search waiting)" in final
    tree = cli_out(fleet_cli, capsys, "status", "--tree")
    lines = [ln.rstrip() for ln in tree.splitlines() if ln.strip()]
    assert lines[0].startswith("sprep") and "queued" in lines[0], lines
    assert lines[1].startswith("└─ stune (search)") and "waiting" in lines[1], lines
    assert lines[2].startswith("   └─ sfinal") and "waiting" in lines[2], lines


def test_why_of_a_following_search_says_what_it_waits_on_then_what_cancelled_it(
    app, redis_client, fleet_cli, capsys
):
    manifest = loads(SEARCH_PIPELINE, "spipe.toml")
    publish(app, redis_client, manifest)
    out = cli_out(fleet_cli, capsys, "why", "stune")
    assert "stune: search waiting" in out
    assert "waits on sprep (queued): no trial is issued until every one succeeded" in out
    assert json.loads(cli_out(fleet_cli, capsys, "why", "stune", "--json"))["waits_on"] == ["sprep"]
    prep = next(j.job_id for j in manifest.jobs if j.name == "sprep")
    Records(redis_client).cancel(prep)  # a cancelled upstream cancels what follows it
    out = cli_out(fleet_cli, capsys, "why", "stune")
    assert "stune: search cancelled" in out
    assert "cancelled by its pipeline: upstream sprep was cancelled" in out
    assert "fleet requeue sprep" in out
