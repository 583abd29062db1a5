"""One path for a metric line on a real Redis: the runner reads a trial's lines, the history
and its search's pruner store hear the same points, the search writes the trial's final value
once when it counts its end, and `fleet results` reads that value. A trial with no metric or a
non-finite one fails for its search with the reason; nothing non-finite is ranked best."""

import math
import sys
import threading

import pytest

from core import constants as C
from fleet.manifests import loads
from fleet.publish import publish
from fleet.query import results as R
from manifest.schema import JobSpec
from state import history
from state.jobrecord import JobState
from state.records import Records
from state.search import advance
from state.search.store import RunToken, SearchStore
from state.search.study import Mirror
from state.search.view import read_search
from tasks import runner
from tasks.metrichistory import MetricHistory
from tasks.trial import PENDING_STEPS_MAX, TrialWatch
from tests.harness.records import job_record

pytestmark = pytest.mark.integration


def published(app, redis_client, trials=4, parallel=4, max_failures=5):
    m = loads(
        f'[[jobs]]\nname = "tune"\ncommand = ["true"]\n[jobs.search]\ntrials = {trials}\n'
        f'parallel = {parallel}\nmetric = "loss"\npruner = "none"\n'
        f"max_failures = {max_failures}\n[jobs.search.space]\nx = {{ low = 0.0, high = 1.0 }}\n",
        "m.toml",
    )
    publish(app, redis_client, m)
    sid = m.searches[0].search_id
    return sid, SearchStore(redis_client).config(sid)


def run_trial(redis_client, sid, config, number, script: str):
    """Run trial ``number``'s job as a worker does: the runner, the history, the watch, then
    its end recorded and its search advanced. Its outcome."""
    view = read_search(redis_client, sid)
    jid = view.trials[number].job_id
    job = JobSpec(name=f"tune[trial={number}]", job_id=jid, search=sid, trial=number)
    writer = MetricHistory(redis_client, jid, run=1)
    records = Records(redis_client)
    assert records.claim(jid, "w", "tok", {}, "cpu").run
    watch = TrialWatch(redis_client, job, config, lambda: None, token="tok")
    out = runner.run(
        [sys.executable, "-c", script],
        env={"PATH": "/usr/bin:/bin"},
        cwd="/tmp",
        timeout_s=60,
        on_tick=lambda p: writer.flush() and None,
        stop=threading.Event(),
        tick_s=0.2,
        on_metric=lambda p: (writer.record(p), watch(p)),
    )
    writer.flush()
    watch.close()
    assert records.finish(jid, "tok", JobState.SUCCEEDED, last_error="")
    advance.advance(redis_client, sid)
    return out


def lines(values, key="loss") -> str:
    return (
        "import json\n"
        f"for i, v in enumerate({values!r}):\n"
        f"    print('FLEET_METRIC ' + json.dumps({{'epoch': i, {key!r}: float(v)}}), flush=True)\n"
    )


def test_a_fast_trials_history_pruner_store_and_final_value_agree(app, redis_client):
    sid, config = published(app, redis_client)
    n = 20_000
    script = (
        "import json\n"
        f"for i in range({n}):\n"
        "    print('FLEET_METRIC ' + json.dumps({'step': i, 'loss': 1 / (i + 1)}))\n"
    )
    run_trial(redis_client, sid, config, 0, script)
    trial = read_search(redis_client, sid).trials[0]
    jid = trial.job_id
    points = history.read(redis_client, jid)
    assert points[-1]["step"] == n - 1 and len(points) == C.METRIC_HISTORY_MAX_POINTS
    assert trial.state == "succeeded" and trial.value == pytest.approx(1 / n)
    assert history.final(points, "loss") == trial.value  # one final, from one point
    # the pruner's store: capped, a subset of the same steps with the same values
    assert 0 < len(trial.steps) <= C.SEARCH_STEPS_MAX
    assert all(v == pytest.approx(1 / (s + 1)) for s, v in trial.steps.items())
    board = R.leaderboard(redis_client, "tune")
    assert board.best.job_id == jid and board.best.value == trial.value


def test_a_trial_without_the_metric_fails_and_stops_its_search_naming_what_it_printed(
    app, redis_client, fleet_cli, capsys
):
    sid, config = published(app, redis_client, max_failures=2)
    for number in (0, 1):
        run_trial(redis_client, sid, config, number, lines([3, 2, 1], key="valid_loss"))
    view = read_search(redis_client, sid)
    assert view.counts["failed"] == 2 and view.counts["succeeded"] == 0
    assert view.trials[0].reason == "no 'loss' in trial 0's metric lines; it printed valid_loss"
    # the first such trial's end stops the search (a manifest mistake, not max_failures)
    assert "stopped: metric 'loss' is in no line trial 0 printed (it printed valid_loss)" in (
        view.summary()
    )
    from fleet.query.why import why

    assert why(redis_client, "tune[trial=0]").search.trial_failed.startswith("no 'loss'")
    board = R.leaderboard(redis_client, "tune")
    assert board.best is None and {t.state for t in board.trials[:2]} == {"failed"}
    assert fleet_cli(["results", "tune", "--metric", "valid_los"]) != 0
    assert "did you mean 'valid_loss'?" in capsys.readouterr().err


@pytest.mark.parametrize("last", ["nan", "inf", "-inf"])
def test_a_trial_ending_non_finite_fails_for_its_search_and_the_search_goes_on(
    app, redis_client, last, tmp_path
):
    sid, config = published(app, redis_client, trials=6, parallel=2)
    run_trial(redis_client, sid, config, 0, lines([3, 2, last]))
    run_trial(redis_client, sid, config, 1, lines([3, 2, 1.5]))
    view = read_search(redis_client, sid)
    assert [t.state for t in view.trials[:2]] == ["failed", "succeeded"]
    assert view.trials[0].value is None
    assert view.trials[0].reason == f"trial 0 ended with loss={last}, not a result"
    assert (view.best_value, view.best_trial, view.issued) == (1.5, 1, 4)  # it went on
    # the Optuna mirror builds afresh (as after a restart) and the export does not crash
    Mirror(sid, config).refresh(redis_client)
    from fleet.optuna_export import write

    board = R.leaderboard(redis_client, "tune")
    db = f"sqlite:///{tmp_path / 's.db'}"
    assert write(board, config.space, "minimize", "tune", db).trials == 4
    assert board.best.trial == 1 and board.best.value == 1.5
    failed = next(t for t in board.trials if t.trial == 0)
    assert failed.value is None and failed.reason.endswith("not a result")


def test_a_plain_job_ending_in_nan_is_not_ranked_by_its_last_finite_value():
    points = [{"step": 1, "loss": 0.1}, {"step": 2, "loss": "nan"}]
    other = [{"step": 1, "loss": 0.5}]
    board = R.build(
        "j",
        [
            job_record(job_id="a", name="j[a=1]", state="succeeded"),
            job_record(job_id="b", name="j[a=2]", state="succeeded"),
        ],
        {"a": points, "b": other},
        metric="loss",
    )
    assert board.best.job_id == "b"
    nan_row = next(t for t in board.trials if t.job_id == "a")
    assert nan_row.value is None and "loss=nan" in nan_row.reason
    assert math.isnan(history.final(points, "loss"))


def test_a_pruned_trials_final_value_is_the_one_it_was_judged_by(app, redis_client):
    sid, config = published(app, redis_client)
    store = SearchStore(redis_client)
    jid = read_search(redis_client, sid).trials[0].job_id
    records = Records(redis_client)
    assert records.claim(jid, "w", "tok", {}, "cpu").run
    assert store.report(sid, 0, {4: 0.9}, run=RunToken(jid, "tok"), last=(4, 0.9))  # then stopped
    history.append(redis_client, jid, [{"step": 4, "loss": 0.9}, {"step": 5, "loss": 0.2}])
    assert records.finish(jid, "tok", JobState.PRUNED, last_error="")
    advance.advance(redis_client, sid)
    assert read_search(redis_client, sid).trials[0].value == 0.9
    row = next(t for t in R.leaderboard(redis_client, "tune").trials if t.trial == 0)
    assert (row.state, row.value) == ("pruned", 0.9)


def test_nan_and_infinite_steps_never_reach_the_pruner_and_the_last_finite_one_does(
    app, redis_client
):
    m = loads(
        '[[jobs]]\nname = "p"\ncommand = ["true"]\n[jobs.search]\ntrials = 2\nparallel = 2\n'
        'metric = "loss"\npruner = "asha"\nmin_resource = 1\n'
        "[jobs.search.space]\nx = { low = 0.0, high = 1.0 }\n",
        "m.toml",
    )
    publish(app, redis_client, m)
    sid = m.searches[0].search_id
    config = SearchStore(redis_client).config(sid)
    view = read_search(redis_client, sid)
    job = JobSpec(name="p[trial=0]", job_id=view.trials[0].job_id, search=sid, trial=0)
    assert Records(redis_client).claim(job.job_id, "w", "tok", {}, "cpu").run
    watch = TrialWatch(redis_client, job, config, lambda: None, token="tok")
    from trainers.protocol import parse_metric_line, point_of

    for i, text in enumerate(["3.0", "NaN", "Infinity", "-Infinity", "2.0"], start=1):
        watch(point_of(parse_metric_line(f'FLEET_METRIC {{"epoch": {i}, "loss": {text}}}'), i))
        watch.flush()  # the pruner decides on each: a NaN would prune (or break) it
    watch.close()
    assert not watch.pruned.is_set()
    trial = read_search(redis_client, sid).trials[0]
    assert trial.steps == {1: 3.0, 5: 2.0}
    assert redis_client.hget(C.SEARCH_KEY + sid + ":trial:0", "last_value") == "2.0"


def test_a_trials_lines_never_wait_on_its_search_even_with_redis_away(app, redis_client):
    import time

    import redis

    from trainers.protocol import point_of

    sid, config = published(app, redis_client)
    view = read_search(redis_client, sid)
    away = redis.Redis(port=1, socket_connect_timeout=0.5)
    # who asks the unreachable Redis for a connection: only the watch's own decider may
    askers, get_connection = set(), away.connection_pool.get_connection

    def asked(*args, **kw):
        askers.add(threading.get_ident())
        return get_connection(*args, **kw)

    away.connection_pool.get_connection = asked
    job = JobSpec(name="tune[trial=0]", job_id=view.trials[0].job_id, search=sid, trial=0)
    watch = TrialWatch(away, job, config, lambda: None, token="tok")
    points = [point_of({"step": i, "loss": 1.0 / (i + 1)}, i) for i in range(50_000)]
    started = time.perf_counter()
    for p in points:
        watch(p)
    took = time.perf_counter() - started
    # the reader's thread never reached for Redis (each try would wait 0.5 s for a connection)
    assert threading.get_ident() not in askers, "a line waited on the search's Redis"
    assert took < 60, f"50,000 lines took {took:.2f} s to hand to the watch"  # a hang guard
    assert len(watch._steps) <= PENDING_STEPS_MAX  # what waits for a decision stays bounded
    watch.close(timeout_s=2.0)
