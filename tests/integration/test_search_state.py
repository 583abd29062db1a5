"""A search's fenced core on a real Redis, without workers: publish issues the first
``parallel`` trials; each end advances once; races, budgets and re-publishing."""

import io
import threading

import pytest
import redis
from rich.console import Console

from core import constants as C
from fleet.manifests import loads
from fleet.publish import publish
from state.jobrecord import JobState
from state.records import Records
from state.search import advance
from state.search.store import RunToken, SearchStore
from state.search.study import Mirrors
from state.search.view import find_searches, read_search
from tests.harness.searches import end, live_jobs

pytestmark = pytest.mark.integration


def manifest(trials=6, parallel=2, sampler="tpe", max_failures=5, lr_high=1.0):
    return loads(_text(trials, parallel, sampler, max_failures, lr_high), "m.toml")


def _text(trials=6, parallel=2, sampler="tpe", max_failures=5, lr_high=1.0) -> str:
    return f'''[[jobs]]
name = "tune"
command = ["python", "obj.py"]
hyper = {{ epochs = 5 }}
[jobs.search]
trials = {trials}
parallel = {parallel}
metric = "loss"
sampler = "{sampler}"
max_failures = {max_failures}
[jobs.search.space]
lr = {{ low = 0.0, high = {lr_high} }}
width = {{ choices = [8, 16, 32] }}
'''


def search(name: str, setting: str, space: str, trials: int = 6):
    """A command job's search of ``trials`` trials, all at once, with one more setting."""
    return loads(
        f'[[jobs]]\nname = "{name}"\ncommand = ["true"]\n[jobs.search]\ntrials = {trials}\n'
        f'parallel = {trials}\nmetric = "loss"\n{setting}\n[jobs.search.space]\n{space}\n',
        "m.toml",
    )


def claimed(records: Records, job_id: str) -> None:
    """The trial's job claimed as a worker claims it (its metric writes need the claim)."""
    assert records.claim(job_id, "w", "tok-" + job_id, {}, "cpu").run


def watched_search(app, redis_client, name: str, setting: str):
    """An 8-trial search over x in [0, 1] published with ``setting``; its ID, records, view and
    config, and ``watch_of(n, token=None)``: trial n's job claimed (with ``token``, else
    tok-<job id>) and its TrialWatch, as a worker's run holds them."""
    from manifest.schema import JobSpec
    from tasks.trial import TrialWatch

    m = search(name, setting, "x = { low = 0.0, high = 1.0 }", trials=8)
    publish(app, redis_client, m)
    sid, records = m.searches[0].search_id, Records(redis_client)
    view, config = read_search(redis_client, sid), SearchStore(redis_client).config(sid)

    def watch_of(n: int, token: str | None = None) -> TrialWatch:
        job = JobSpec(name=f"{name}[trial={n}]", job_id=view.trials[n].job_id, search=sid, trial=n)
        token = token or "tok-" + job.job_id
        assert records.claim(job.job_id, "w", token, {}, "cpu").run
        return TrialWatch(redis_client, job, config, lambda: None, token=token)

    return sid, records, view, config, watch_of


def hear(watch, report: dict) -> None:
    """A metric line reaches a trial's watch, and its pruner decides (not waiting its pace)."""
    from trainers.protocol import point_of

    watch(point_of(report, 1))
    watch.flush()


def test_publish_queues_the_first_parallel_trials_with_their_values_in_hyper(app, redis_client):
    m = manifest()
    rows = publish(app, redis_client, m)
    assert [r.action for r in rows] == ["publish"]
    sid = m.searches[0].search_id
    view = read_search(redis_client, sid)
    assert (view.issued, view.running, find_searches(redis_client, "tune")) == (2, 2, [sid])
    rec = Records(redis_client).get(view.trials[1].job_id)
    assert rec.name == "tune[trial=1]" and rec.state is JobState.QUEUED
    assert rec.spec["hyper"] == {"epochs": 5, **view.trials[1].params} and rec.spec["trial"] == 1
    assert redis_client.hget(C.JOB_KEY + rec.job_id, "search") == sid


def test_publishing_the_same_search_again_neither_restarts_nor_duplicates_it(app, redis_client):
    publish(app, redis_client, manifest())
    rows = publish(app, redis_client, manifest())
    assert rows[0].action == "skip"
    view = read_search(redis_client, manifest().searches[0].search_id)
    assert view.issued == 2
    assert manifest(lr_high=2.0).searches[0].search_id != view.search_id  # a changed search is new


def test_each_end_advances_once_and_the_budget_ends_the_search(app, redis_client):
    m = manifest(trials=5, parallel=2)
    publish(app, redis_client, m)
    sid, records, store = m.searches[0].search_id, Records(redis_client), SearchStore(redis_client)
    for i in range(5):
        view = read_search(redis_client, sid)
        t = live_jobs(view)[0]
        end(records, t.job_id, JobState.SUCCEEDED, store, sid, t.number, value=float(10 - i))
        advance.advance(redis_client, sid)
        advance.advance(redis_client, sid)  # a second look at the same end changes nothing
    view = read_search(redis_client, sid)
    assert (view.issued, view.ended, view.counts[JobState.SUCCEEDED], view.running) == (5, 5, 5, 0)
    assert view.best_value == 6.0 and view.done
    assert "5/5" in view.summary() and "best loss=6 (trial" in view.summary()
    assert sid not in redis_client.smembers(C.ACTIVE_SEARCHES_KEY)


def test_a_view_read_while_the_last_ends_are_counted_is_never_done_with_ends_uncounted(
    app, redis_client
):
    """The view's counters and live set are one snapshot: a sync that counts the last ends
    between its reads of the two (it takes a trial out of `live` as it counts its end) showed
    the search done, no trial live, with an end uncounted (e2e test_pbt: done with 4 issued, 3
    ended). Here the sync lands right after any separate read of the search's hash."""
    m = manifest(trials=2, parallel=2)
    publish(app, redis_client, m)
    sid, records, store = m.searches[0].search_id, Records(redis_client), SearchStore(redis_client)
    for t in live_jobs(read_search(redis_client, sid)):
        end(records, t.job_id, JobState.SUCCEEDED, store, sid, t.number, value=1.0)
    synced = []

    class SyncAfterRead(redis.Redis):
        def execute_command(self, *args, **options):
            out = super().execute_command(*args, **options)
            if args[0] == "HGETALL" and args[1] == f"fleet:search:{sid}" and not synced:
                synced.append(store.sync(sid))
            return out

    racing = SyncAfterRead(connection_pool=redis_client.connection_pool)
    view = read_search(racing, sid)
    assert view.ended + view.running == view.issued == 2, view
    assert not view.done or view.ended == 2, view
    store.sync(sid)  # counted now, by whoever counts them
    after = read_search(racing, sid)
    assert (after.ended, after.running, after.done) == (2, 0, True)


def test_processes_advancing_at_once_never_issue_a_number_twice_or_exceed_parallel(
    app, redis_client
):
    m = manifest(trials=40, parallel=4)
    publish(app, redis_client, m)
    sid, records = m.searches[0].search_id, Records(redis_client)
    for _ in range(8):
        for t in live_jobs(read_search(redis_client, sid)):
            end(
                records, t.job_id, JobState.SUCCEEDED, SearchStore(redis_client), sid, t.number, 1.0
            )
        # four processes see the same ends, each with its own mirrors
        threads = [
            threading.Thread(
                target=advance.advance, args=(redis_client, sid), kwargs={"mirrors": Mirrors()}
            )
            for _ in range(4)
        ]
        [t.start() for t in threads]
        [t.join() for t in threads]
        assert read_search(redis_client, sid).running <= 4
    view = read_search(redis_client, sid)
    assert view.issued == 36 and len({t.job_id for t in view.trials}) == 36
    assert [t.number for t in view.trials] == list(range(36))


def test_max_failures_failed_in_a_row_stop_the_search_and_say_why(app, redis_client):
    m = manifest(trials=20, parallel=2, max_failures=3)
    publish(app, redis_client, m)
    sid, records = m.searches[0].search_id, Records(redis_client)
    for _ in range(3):
        t = live_jobs(read_search(redis_client, sid))[0]
        end(records, t.job_id, JobState.FAILED)
        advance.advance(redis_client, sid)
    view = read_search(redis_client, sid)
    assert view.stopped.startswith("3 trials failed in a row (max_failures=3)")
    assert view.running == 1 and view.issued == 4  # the one running finishes; nothing new
    t = live_jobs(view)[0]
    end(records, t.job_id, JobState.SUCCEEDED)
    assert advance.advance(redis_client, sid) == [] and read_search(redis_client, sid).done
    assert "stopped: 3 trials failed in a row" in read_search(redis_client, sid).summary()
    from fleet.query.why import why

    assert why(redis_client, "tune[trial=0]").search.stopped.endswith("the last: trial 2 boom")


@pytest.mark.parametrize(
    "fields, shown",
    [
        (  # as a worker records a failed run: the reason line its end names
            {"end_reason": "exited with status 1: ZeroDivisionError: division by zero"},
            "trial 0 exited with status 1: ZeroDivisionError: division by zero",
        ),
        ({}, "trial 0 job tune exited with status 1; last output: ZeroDivisionError: x"),
        ({"end_reason": "exited with status 1: " + "x" * 900}, None),
    ],
)
def test_a_failed_trial_says_what_its_output_said_in_one_bounded_line(
    app, redis_client, fields, shown
):
    """Its error puts the output after a newline: the line the status shows is never the
    bare 'last output:' with nothing after it."""
    m = manifest(trials=4, parallel=1)
    publish(app, redis_client, m)
    sid, records = m.searches[0].search_id, Records(redis_client)
    t = live_jobs(read_search(redis_client, sid))[0]
    assert records.claim(t.job_id, "w", "tok", {}, "cpu").run
    error = "job tune exited with status 1; last output:\nTraceback\nZeroDivisionError: x\n"
    assert records.finish(t.job_id, "tok", JobState.FAILED, last_error=error, **fields)
    advance.advance(redis_client, sid)
    view = read_search(redis_client, sid)
    assert not view.last_failure.endswith("last output:")
    if shown is None:
        assert len(view.last_failure) == 300 and view.last_failure.endswith("xx...")
    else:
        assert view.last_failure == shown
    assert view.last_failure in view.summary()
    assert view.trials[0].reason == view.last_failure  # `fleet results` says it under its table
    from fleet.cli.results import render
    from fleet.query.results import leaderboard

    board = leaderboard(redis_client, "tune")
    assert [t.reason for t in board.trials if t.trial == 0] == [view.last_failure]
    console = Console(width=80, record=True, file=io.StringIO(), markup=False)
    console.print(render(board, width=80))
    text = console.export_text()
    assert max(len(line) for line in text.splitlines()) <= 80
    assert "failed:" + "".join(view.last_failure.split()) in "".join(text.split())


def test_a_grid_search_samples_each_point_of_its_grid(app, redis_client):
    m = search(
        "grid",
        'sampler = "grid"',
        'a = { choices = ["x", "y"] }\nb = { low = 1, high = 3, step = 1 }',
    )
    publish(app, redis_client, m)
    view = read_search(redis_client, m.searches[0].search_id)
    assert sorted((t.params["a"], t.params["b"]) for t in view.trials) == [
        (a, b) for a in ("x", "y") for b in (1, 2, 3)
    ]


def test_a_replayed_step_keeps_its_last_value_as_the_history_does(redis_client, job):
    store, run = SearchStore(redis_client), RunToken(job, "tok")
    assert Records(redis_client).claim(job, "w", "tok", {}, "cpu").run
    assert store.report("s", 0, {3: 0.5}, run=run, last=(3, 0.5))
    assert store.report("s", 0, {3: 0.9}, run=run, last=(3, 0.9))  # a resumed run replays step 3
    assert redis_client.hgetall(C.SEARCH_KEY + "s:iv:0") == {"3": "0.9"}
    assert redis_client.hget(C.SEARCH_KEY + "s:trial:0", "last_value") == "0.9"
    assert store.last_step("s", 0) == (3, 1)


@pytest.mark.parametrize(
    "pruner, prunes",
    [("median", True), ("asha", True), ("percentile", True), ("hyperband", None), ("none", False)],
)
def test_a_trial_far_behind_the_finished_ones_is_pruned_by_the_search_pruner(
    app, redis_client, pruner, prunes
):
    from manifest.schema import JobSpec
    from tasks.trial import TrialWatch

    m = search("p", f'pruner = "{pruner}"', "x = { low = 0.0, high = 1.0 }", trials=8)
    publish(app, redis_client, m)
    sid, records = m.searches[0].search_id, Records(redis_client)
    view = read_search(redis_client, sid)
    config = SearchStore(redis_client).config(sid)
    woken = []

    def watch_of(n: int) -> TrialWatch:
        job = JobSpec(name=f"p[trial={n}]", job_id=view.trials[n].job_id, search=sid, trial=n)
        claimed(records, job.job_id)
        return TrialWatch(
            redis_client, job, config, lambda: woken.append(n), token="tok-" + job.job_id
        )

    # five trials with good curves, one after another, as a worker hears them
    for t in view.trials[:5]:
        good = watch_of(t.number)
        for step in range(10):
            hear(good, {"epoch": step, "loss": 1.0 / (step + 1)})
        good.close()
        end(records, t.job_id, JobState.SUCCEEDED)
        advance.advance(redis_client, sid)  # as its worker does
    assert not woken
    watch = watch_of(5)
    for step in range(10):
        hear(watch, {"epoch": step, "loss": 50.0})
        if watch.pruned.is_set():
            break
    if prunes is not None:
        assert watch.pruned.is_set() is prunes and bool(woken) is prunes
    if prunes:
        assert watch.pruned_at < 9


def test_the_sweep_issues_the_first_trials_of_a_search_whose_publisher_died_and_counts_unadvanced_ends(  # noqa: E501
    app, redis_client, monkeypatch
):
    m = manifest(trials=4, parallel=2)
    # the publisher dies after the record
    monkeypatch.setattr(advance, "advance", lambda *a, **k: [])
    publish(app, redis_client, m)
    monkeypatch.undo()
    sid = m.searches[0].search_id
    assert read_search(redis_client, sid).issued == 0
    assert advance.sweep(redis_client) == {sid: [0, 1]}
    t = live_jobs(read_search(redis_client, sid))[0]
    end(Records(redis_client), t.job_id, JobState.SUCCEEDED)  # its worker died before advancing
    assert advance.sweep(redis_client) == {sid: [2]}
    view = read_search(redis_client, sid)
    assert (view.ended, view.issued, view.running) == (1, 3, 2)
    mirrors = Mirrors()
    mirrors.get(redis_client, sid, view.config)
    redis_client.srem(C.ACTIVE_SEARCHES_KEY, sid)  # over: the sweep forgets its mirror
    advance.sweep(redis_client, mirrors=mirrors)
    assert mirrors._by_id == {}


def test_status_folds_a_search_into_one_line_and_all_lists_its_trials(
    app, redis_client, fleet_cli, capsys, tmp_path
):
    path = tmp_path / "s.toml"
    path.write_text(
        '[[jobs]]\nname = "folded"\ncommand = ["true"]\n[jobs.search]\ntrials = 5\nparallel = 3\n'
        'metric = "loss"\n[jobs.search.space]\nx = { low = 0.0, high = 1.0 }\n'
    )
    assert fleet_cli(["publish", str(path), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "5 trials, at most 3 at once" in out and "x: uniform in [0, 1]" in out
    assert fleet_cli(["publish", str(path)]) == 0
    capsys.readouterr()
    assert fleet_cli(["status", "--wide"]) == 0
    out = capsys.readouterr().out
    assert "folded: search 0/5, 3 queued" in out and "folded[trial=" not in out
    assert "3 jobs: 3 trials in search lines below" in out
    assert fleet_cli(["status", "--all", "--wide"]) == 0
    assert out.count("folded[trial=") == 0 and capsys.readouterr().out.count("folded[trial=") == 3
    first = read_search(redis_client, find_searches(redis_client, "folded")[0]).trials[0]
    assert Records(redis_client).claim(first.job_id, "w", "tok", {}, "cpu").run
    assert fleet_cli(["status"]) == 0
    assert "folded: search 0/5, 1 running, 2 queued" in capsys.readouterr().out


def test_a_requeued_trial_that_ended_runs_again_and_its_search_counts_its_new_end_once(
    app, redis_client, fleet_cli, capsys
):
    m = manifest(trials=3, parallel=2)
    publish(app, redis_client, m)
    sid, records, store = m.searches[0].search_id, Records(redis_client), SearchStore(redis_client)
    first, second = read_search(redis_client, sid).trials[:2]
    end(records, first.job_id, JobState.SUCCEEDED, store, sid, 0, value=0.5)
    advance.advance(redis_client, sid)  # trial 2 takes its place: 2 running, as parallel allows
    assert fleet_cli(["requeue", "tune[trial=0]"]) == 1
    assert "runs 2 trials already (parallel=2)" in capsys.readouterr().out
    end(records, second.job_id, JobState.SUCCEEDED, store, sid, 1, value=0.9)
    advance.advance(redis_client, sid)
    assert (read_search(redis_client, sid).ended, read_search(redis_client, sid).best_trial) == (
        2,
        0,
    )
    assert fleet_cli(["requeue", "tune[trial=0]"]) == 0
    view = read_search(redis_client, sid)  # it counts as running again: its end taken back
    assert (view.ended, view.counts[JobState.SUCCEEDED], view.running, view.best_trial) == (
        1,
        1,
        2,
        1,
    )
    assert "search 1/3, 2 queued, best loss=0.9 (trial 1)" in view.summary()
    assert records.claim(first.job_id, "w", "tok-again", {}, "cpu").run
    # the new run reports one more step
    assert store.report(sid, 0, {6: 0.25}, run=RunToken(first.job_id, "tok-again"), last=(6, 0.25))
    assert records.finish(first.job_id, "tok-again", JobState.SUCCEEDED, last_error="")
    for _ in range(2):  # its worker and the sweep both see the new end
        advance.advance(redis_client, sid)
    view = read_search(redis_client, sid)
    assert (view.ended, view.counts[JobState.SUCCEEDED], view.best_value, view.best_trial) == (
        2,
        2,
        0.25,
        0,
    )
    t = live_jobs(view)[0]
    end(records, t.job_id, JobState.SUCCEEDED, store, sid, t.number, value=0.75)
    assert advance.advance(redis_client, sid) == []  # the mirror rebuilt around the reopened trial
    assert read_search(redis_client, sid).done and read_search(redis_client, sid).ended == 3


def test_status_watch_folds_a_search_published_after_it_started(app, redis_client):
    import argparse
    import io

    from rich.console import Console

    from fleet.cli.jobs import _frames
    from fleet.query.jobs import JobFilter

    frames = _frames(
        redis_client, JobFilter(), argparse.Namespace(all=False, limit=None, every=1.0, wide=True)
    )
    publish(app, redis_client, manifest())  # after the watch read the searches (none then)
    out = Console(file=io.StringIO(), width=200)
    out.print(next(frames))
    text = out.file.getvalue()
    assert "tune: search 0/6, 2 queued" in text and "tune[trial=" not in text


def test_a_search_tables_own_owner_key_owns_its_trials(app, redis_client):
    text = (
        '[[jobs]]\nname = "owned"\ncommand = ["true"]\nowner = "dana"\n[jobs.search]\ntrials = 2\n'
        'parallel = 2\nmetric = "loss"\n[jobs.search.space]\nlr = { low = 0.0, high = 1.0 }\n'
    )
    m = loads(text, "m.toml")
    publish(app, redis_client, m, owner="erin")
    view = read_search(redis_client, m.searches[0].search_id)
    assert {Records(redis_client).get(t.job_id).owner for t in view.trials} == {"dana"}


def test_racing_requeues_of_ended_trials_never_run_more_than_parallel(app, redis_client):
    from state.search import trials

    m = manifest(trials=4, parallel=2)
    publish(app, redis_client, m)
    sid, records, store = m.searches[0].search_id, Records(redis_client), SearchStore(redis_client)
    for _ in range(2):  # all four trials run and end, two at a time
        for t in live_jobs(read_search(redis_client, sid)):
            end(records, t.job_id, JobState.SUCCEEDED, store, sid, t.number, value=1.0)
        advance.advance(redis_client, sid)
    view = read_search(redis_client, sid)
    assert (view.ended, view.running) == (4, 0)
    for round_ in range(3):
        got = []
        threads = [  # four operators requeue the four trials at once
            threading.Thread(
                target=lambda jid=t.job_id, out=got: out.append(trials.requeue(records, jid))
            )
            for t in view.trials
        ]
        [t.start() for t in threads]
        [t.join() for t in threads]
        results = sorted(r.result.value for r in got)
        assert results == ["full", "full", "requeued", "requeued"], round_
        assert all("parallel=2" in r.why for r in got if not r.done)
        after = read_search(redis_client, sid)
        queued = [t for t in after.trials if t.state is JobState.QUEUED]
        assert (after.running, len(queued), after.ended) == (2, 2, 2)
        for t in queued:  # they run again and end; the next round requeues anew
            end(records, t.job_id, JobState.SUCCEEDED, store, sid, t.number, value=1.0)
        advance.advance(redis_client, sid)
        view = read_search(redis_client, sid)
        assert (view.ended, view.running, view.counts[JobState.SUCCEEDED]) == (4, 0, 4)


def test_a_trial_not_ended_or_no_trial_at_all_is_not_requeued_as_a_trial(app, redis_client):
    from state.search import trials
    from state.search.store import Requeued

    m = manifest(trials=2, parallel=2)
    publish(app, redis_client, m)
    records = Records(redis_client)
    t = read_search(redis_client, m.searches[0].search_id).trials[0]
    rerun = trials.requeue(records, t.job_id)
    assert (rerun.result, rerun.was, rerun.done) == (Requeued.NOT_ENDED, "queued", False)
    assert "is queued: requeue runs a failed" in rerun.why


def test_a_changed_search_under_a_taken_name_is_refused_with_the_fix(
    app, redis_client, fleet_cli, capsys, tmp_path
):
    from core.errors import SearchRefused

    publish(app, redis_client, manifest())
    changed = manifest(lr_high=2.0)
    (row,) = [r for r in publish(app, redis_client, changed, dry_run=True) if r.job.search]
    assert row.action == "skip" and row.why.startswith("refused: another search is named tune")
    assert 'name = "tune-2"' in row.why
    with pytest.raises(SearchRefused, match="another search is named tune"):
        publish(app, redis_client, changed)
    assert not redis_client.exists(C.SEARCH_KEY + changed.searches[0].search_id)
    assert find_searches(redis_client, "tune") == [manifest().searches[0].search_id]
    path = tmp_path / "m.toml"
    path.write_text(_text(lr_high=2.0))
    assert fleet_cli(["publish", str(path), "--dry-run"]) == 0
    assert "refused: another search is named tune" in capsys.readouterr().out
    assert fleet_cli(["publish", str(path)]) != 0
    captured = capsys.readouterr()
    assert "another search is named tune" in captured.out + captured.err


def test_the_same_search_publishes_again_under_its_name_unchanged(app, redis_client):
    publish(app, redis_client, manifest())
    rows = publish(app, redis_client, manifest())
    assert [r.why for r in rows if r.job.search] == ["search exists (0/6 ended)"]


@pytest.mark.parametrize("last_step, pruned", [(4, False), (10, True)])
def test_a_trial_at_its_searchs_last_step_completes_though_its_rung_would_prune_it(
    app, redis_client, last_step, pruned
):
    """ASHA's first rung is step 4: at a budget of 4 steps that is the trial's end, so it
    completes; at a budget of 10 it is stopped early there, and recorded pruned."""
    sid, records, view, config, watch_of = watched_search(
        app,
        redis_client,
        "r",
        f'pruner = {{ name = "asha", min_resource = 4, reduction_factor = 2 }}\n'
        f"last_step = {last_step}",
    )
    assert config.last_step == last_step

    def feed(w, value) -> None:
        for step in range(1, 5):
            hear(w, {"epoch": step, "loss": value(step)})
        w.close()

    for t in view.trials[:5]:
        feed(watch_of(t.number), lambda step: 1.0 / step)
        end(records, t.job_id, JobState.SUCCEEDED)
        advance.advance(redis_client, sid)
    bad = watch_of(5)
    feed(bad, lambda step: 50.0)
    assert bad.pruned.is_set() is pruned
    assert bad.at_last_step(4) is not pruned


def test_arguments_optuna_refuses_refuse_the_search_at_publish_with_optunas_reason(
    app, redis_client
):
    from core.errors import SearchRefused

    m = search(
        "bad", 'pruner = { name = "asha", reduction_factor = 1 }', "x = { low = 0, high = 1 }"
    )
    (row,) = [r for r in publish(app, redis_client, m, dry_run=True) if r.job.search]
    assert row.action == "skip" and "refused: pruner asha:" in row.why
    assert "reduction_factor >= 2" in row.why and "[jobs.search]" in row.why
    with pytest.raises(SearchRefused, match="reduction_factor"):
        publish(app, redis_client, m)
    assert find_searches(redis_client, "bad") == []


def test_cancelling_a_trial_advances_its_search_at_once(app, redis_client):
    from state.search import trials

    m = manifest(trials=3, parallel=2)
    publish(app, redis_client, m)
    sid, records = m.searches[0].search_id, Records(redis_client)
    first = read_search(redis_client, sid).trials[0]
    res, not_advanced = trials.cancel(records, first.job_id)
    assert res.done and not_advanced == ""
    view = read_search(redis_client, sid)  # its end counted and the next trial issued
    assert (view.counts[JobState.CANCELLED], view.issued, view.running) == (1, 3, 2)


def test_a_trial_that_reaches_its_last_step_while_a_prune_verdict_is_pending_completes(
    app, redis_client
):
    """The race an operator saw: the pruner says stop at step 2 while the run, a fast one,
    already printed its steps 3 and 4 (its last) and is exiting. It ran its whole budget: it
    is complete, not pruned, its final value is its step-4 value (not the one it was judged
    by), and Optuna is told COMPLETE."""
    from state.search.study import MIRRORS
    from tasks.run import Stop
    from tasks.runend import stopped_early
    from trainers.protocol import point_of

    sid, records, view, config, watch_of = watched_search(
        app,
        redis_client,
        "race",
        'pruner = { name = "asha", min_resource = 2, reduction_factor = 2 }\nlast_step = 4',
    )

    for t in view.trials[:5]:
        good = watch_of(t.number)
        for step in range(1, 5):
            hear(good, {"epoch": step, "loss": 1.0 / step})
        good.close()
        end(records, t.job_id, JobState.SUCCEEDED)
        advance.advance(redis_client, sid)
    late = watch_of(5)
    hear(late, {"epoch": 1, "loss": 50.0})
    hear(late, {"epoch": 2, "loss": 40.0})  # at its rung, far behind: stop
    assert late.pruned.is_set() and late.pruned_at == 2 and not late.ran_to_end()
    assert late.on_tick(None) is Stop.PRUNED
    # the run printed its last steps before the runner's tick took the verdict up
    late(point_of({"epoch": 3, "loss": 0.3}, 3))
    late(point_of({"epoch": 4, "loss": 0.1}, 4))
    assert late.ran_to_end() and late.on_tick(None) is None  # the stop is withdrawn
    late.close()
    # the runner's kill landed as the process was exiting: what the run did decides
    assert not stopped_early(Stop.PRUNED, -9, late.ran_to_end())
    end(records, view.trials[5].job_id, JobState.SUCCEEDED)
    advance.advance(redis_client, sid)
    t5 = read_search(redis_client, sid).trials[5]
    assert (t5.state, t5.value) == ("succeeded", 0.1)
    mirror = MIRRORS.get(redis_client, sid, config)
    frozen = mirror.study.get_trials(deepcopy=False)[5]
    assert (frozen.state.name, frozen.value) == ("COMPLETE", 0.1)


def test_a_rerun_trial_is_not_pruned_at_a_step_an_earlier_run_was_let_past(app, redis_client):
    """A trial's run reached step 4, let past its pruner, then lost its job (cut off past its
    lease); the rerun replays steps 1-4 after other trials reported far better values. Pruned means
    stopped before a step the trial never reached: the replay is not judged again (seen under
    load: a trial recorded pruned whose stored steps ran past its prune); a step past the
    earlier run's is judged as ever."""
    sid, records, view, _, watch_of = watched_search(
        app, redis_client, "rerun", 'pruner = "median"\nlast_step = 10'
    )

    def feed(w, steps, value) -> None:
        for step in steps:
            hear(w, {"epoch": step, "loss": value})

    first = watch_of(5, "tok-first")
    feed(first, range(1, 5), 0.5)  # the first trial to report: nothing to judge it against
    assert not first.pruned.is_set()
    first.close()
    redis_client.delete(C.LEASE_KEY + view.trials[5].job_id)  # cut off: its lease lapsed
    for t in view.trials[:5]:  # meanwhile five trials report far better values
        good = watch_of(t.number)
        feed(good, range(1, 9), 0.01)
        good.close()
        end(records, t.job_id, JobState.SUCCEEDED)
        advance.advance(redis_client, sid)
    rerun = watch_of(5, "tok-rerun")
    feed(rerun, range(1, 5), 50.0)  # far behind the median at steps the first run passed
    assert not rerun.pruned.is_set()
    feed(rerun, range(5, 7), 50.0)  # step 5: never reached before, judged
    assert rerun.pruned.is_set() and rerun.pruned_at == 5
    rerun.close()


def test_why_of_a_searchs_name_explains_the_search_not_a_sweep_of_its_trials(
    app, redis_client, fleet_cli, capsys, monkeypatch
):
    import json

    from fleet.cli.common import console

    monkeypatch.setattr(console, "width", 80)
    m = manifest(trials=6, parallel=2, max_failures=2)
    publish(app, redis_client, m)
    sid, records = m.searches[0].search_id, Records(redis_client)
    assert fleet_cli(["why", "tune"]) == 0
    out = capsys.readouterr().out
    assert "is a sweep" not in out
    assert out.startswith("tune: search running, 0 of 6 trials ended (2 at once)")
    assert "0 running, 2 queued" in out and "4 more trial(s) to issue" in out
    assert "fleet why 'tune[trial=0]': why its trials wait" in out
    for _ in range(2):
        t = live_jobs(read_search(redis_client, sid))[0]
        end(records, t.job_id, JobState.FAILED)
        advance.advance(redis_client, sid)
    view = read_search(redis_client, sid)
    assert fleet_cli(["why", "tune"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("tune: search stopping, 2 of 6 trials ended")
    assert f"stopped: {view.stopped}" in " ".join(out.split())
    assert "fleet logs 'tune[trial=1]'" in out and "publish the search under a new name" in out
    assert all(len(line) <= 80 for line in out.splitlines())
    assert fleet_cli(["why", "tune", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert (data["state"], data["ended"], data["queued"], data["running"]) == (
        "stopping",
        view.ended,
        view.queued,
        view.running - view.queued,
    )
    assert data["counts"]["failed"] == 2 and data["stopped"] == view.stopped


def test_a_trial_that_printed_other_keys_but_never_the_metric_stops_the_search_naming_them(
    app, redis_client
):
    """A metric no trial prints is the manifest's mistake: one such trial stops the search,
    not max_failures full trials."""
    m = manifest(trials=20, parallel=2, max_failures=5)
    publish(app, redis_client, m)
    sid, records, store = m.searches[0].search_id, Records(redis_client), SearchStore(redis_client)
    t = live_jobs(read_search(redis_client, sid))[0]
    claimed(records, t.job_id)
    run = RunToken(t.job_id, "tok-" + t.job_id)
    assert store.report(sid, t.number, {}, run=run, keys="valid_los, acc")
    assert records.finish(t.job_id, run.token, JobState.SUCCEEDED, last_error="")
    advance.advance(redis_client, sid)
    view = read_search(redis_client, sid)
    assert view.stopped.startswith(f"metric 'loss' is in no line trial {t.number} printed")
    assert "(it printed valid_los, acc)" in view.stopped and "[jobs.search]" in view.stopped
    assert view.issued == 2  # nothing issued after it; the other live trial finishes


def test_a_trial_that_printed_no_metric_at_all_counts_as_a_failure_without_stopping(
    app, redis_client
):
    m = manifest(trials=20, parallel=2, max_failures=5)
    publish(app, redis_client, m)
    sid, records = m.searches[0].search_id, Records(redis_client)
    t = live_jobs(read_search(redis_client, sid))[0]
    end(records, t.job_id, JobState.SUCCEEDED)  # it printed no metric line (a crash, say)
    advance.advance(redis_client, sid)
    view = read_search(redis_client, sid)
    assert view.stopped == "" and view.counts[JobState.FAILED] == 1 and view.issued == 3


def test_a_trial_field_that_does_not_decode_is_reported_not_raised(app, redis_client, caplog):
    from state.search import trial

    m = manifest()
    publish(app, redis_client, m)
    sid = m.searches[0].search_id
    redis_client.hset(trial.trial_key(sid, 0), mapping={"value": "not-a-number", "state": "odd"})
    with caplog.at_level("WARNING", logger="fleet.search"):
        view = read_search(redis_client, sid)
    assert view.trials[0].value is None and view.trials[0].state is JobState.QUEUED
    assert trial.fetch(redis_client, sid, 0).problems == ("value", "state")
    assert f"fleet:search:{sid}:trial:0: value, state" in caplog.text


def test_a_pruned_trial_keeps_its_value_in_the_search_study_as_in_the_optuna_export(
    app, redis_client
):
    """One map from a trial's end to Optuna's: a pruned trial's value is its metric at its
    last step in both (as Optuna's own Study.tell records a pruned trial)."""
    from fleet.optuna_export import frozen
    from fleet.query.results import Trial
    from state.search.study import Mirror, distributions

    m = manifest(trials=2, parallel=2)
    publish(app, redis_client, m)
    sid, records, store = m.searches[0].search_id, Records(redis_client), SearchStore(redis_client)
    t = read_search(redis_client, sid).trials[0]
    end(records, t.job_id, JobState.PRUNED, store, sid, t.number, value=0.75)
    advance.advance(redis_client, sid)
    mirror = Mirror(sid, m.searches[0].config).refresh(redis_client)
    mirrored = mirror.study.trials[0]
    row = Trial(0, "tune[trial=0]", t.job_id, "pruned", t.params, 0.75, 0.75, 1, "h")
    exported = frozen(row, [], "loss", distributions(m.searches[0].config.space))
    assert (mirrored.state, mirrored.value) == (exported.state, exported.value)
    assert mirrored.value == 0.75 and mirrored.state.name == "PRUNED"


def test_a_run_taken_over_cannot_set_its_trials_metric_or_final_value(app, redis_client):
    m = manifest(trials=2, parallel=2)
    publish(app, redis_client, m)
    sid, records, store = m.searches[0].search_id, Records(redis_client), SearchStore(redis_client)
    jid = read_search(redis_client, sid).trials[0].job_id
    old, new = RunToken(jid, "tok-old"), RunToken(jid, "tok-new")
    assert records.claim(jid, "cut-off", old.token, {}, "cpu").run
    assert store.report(sid, 0, {3: 0.5}, run=old, last=(3, 0.5))
    # cut off from Redis past its lease: another host takes the job over
    redis_client.delete(C.LEASE_KEY + jid)
    assert records.claim(jid, "other", new.token, {}, "cpu").run
    assert store.report(sid, 0, {3: 0.4, 4: 0.25}, run=new, last=(4, 0.25))
    # the old run, still training, reaches Redis again: every write of its is refused
    assert not store.report(sid, 0, {9: 0.9}, run=old, last=(9, 0.9), keys="loss, junk")
    assert not store.save_sys(sid, 0, {"rung": 0.9}, run=old)
    trial_key = C.SEARCH_KEY + sid + ":trial:0"
    assert redis_client.hgetall(C.SEARCH_KEY + sid + ":iv:0") == {"3": "0.4", "4": "0.25"}
    assert redis_client.hmget(trial_key, "last_step", "last_value", "keys") == ["4", "0.25", None]
    assert "rung" not in redis_client.hget(trial_key, "sys")
    assert records.finish(jid, new.token, JobState.SUCCEEDED, last_error="")
    advance.advance(redis_client, sid)
    assert read_search(redis_client, sid).trials[0].value == 0.25  # the run that owned it
    assert not store.report(sid, 0, {5: 0.1}, run=new, last=(5, 0.1))  # ended: nothing more
