"""A job's metric history on a real Redis: bounded to its last METRIC_HISTORY_MAX_POINTS,
folded by step when read (a resumed run's replay counts once), read in bulk for many jobs,
fed by the runner's metric lines, and written into a real bundle as metrics.jsonl."""

import io
import json
import tarfile
import threading

import pytest
import zstandard

from artifacts.bundle import bundle
from core import constants as C
from manifest.schema import JobSpec
from state import history
from tasks import runner, upload, workdirs
from tasks.metrichistory import MetricHistory
from trainers.protocol import point_of

pytestmark = pytest.mark.integration
JOB = "a" * 64


def record(writer: MetricHistory, report: dict, count: int = 1) -> None:
    """A metric line reaches the history as the runner hands it on (its point)."""
    writer.record(point_of(report, count))


def test_the_history_keeps_only_the_last_max_points_of_a_job(redis_client):
    writer = MetricHistory(redis_client, JOB, run=1)
    for step in range(1, C.METRIC_HISTORY_MAX_POINTS + 251):
        record(writer, {"step": step, "loss": 1.0 / step})
    assert writer.flush()
    assert redis_client.llen(history.key(JOB)) == C.METRIC_HISTORY_MAX_POINTS
    record(writer, {"step": C.METRIC_HISTORY_MAX_POINTS + 251, "loss": 0.0})
    writer.flush()
    points = history.read(redis_client, JOB)
    assert len(points) == C.METRIC_HISTORY_MAX_POINTS
    assert points[0]["step"] == 252 and points[-1]["step"] == C.METRIC_HISTORY_MAX_POINTS + 251


def test_a_resumed_runs_replayed_steps_are_read_once_with_its_values(redis_client):
    first = MetricHistory(redis_client, JOB, run=1)
    for epoch in (1, 2, 3):
        record(first, {"epoch": epoch, "valid_loss": 10.0 - epoch})
    first.flush()
    second = MetricHistory(redis_client, JOB, run=2)  # resumed from its checkpoint after epoch 1
    record(second, {"resumed_from_epoch": 1})
    for epoch in (2, 3, 4):
        record(second, {"epoch": epoch, "valid_loss": 5.0 - epoch})
    second.flush()
    points = history.read(redis_client, JOB)
    assert [p["step"] for p in points] == [1, 2, 3, 4]
    assert [p["valid_loss"] for p in points] == [9.0, 3.0, 2.0, 1.0]
    assert [p["run"] for p in points] == [2, 2, 2, 2]  # step 1 carries the second run's marker too
    assert points[0]["resumed_from_epoch"] == 1


def test_many_jobs_histories_are_read_in_pipelined_batches(redis_client):
    ids = [f"{i:064x}" for i in range(25)]
    for i, jid in enumerate(ids):
        history.append(
            redis_client, jid, [{"step": 1, "loss": float(i)}, {"step": 2, "loss": i / 2}]
        )
    got = history.read_many(redis_client, ids + ["f" * 64], batch=7)
    assert [got[jid][-1]["loss"] for jid in ids] == [i / 2 for i in range(25)]
    assert got["f" * 64] == []


def test_the_runner_hands_each_metric_line_to_the_history_as_it_is_printed(redis_client):
    writer = MetricHistory(redis_client, JOB, run=3)
    script = (
        "import json\nfor e in (1, 2, 3):\n"
        "    print('FLEET_METRIC ' + json.dumps({'epoch': e, 'loss': 1 / e}))\nprint('done')"
    )
    out = runner.run(
        ["python3", "-c", script],
        env={"PATH": "/usr/bin:/bin"},
        cwd="/tmp",
        timeout_s=30,
        on_tick=lambda p: None,
        stop=threading.Event(),
        tick_s=0.2,
        on_metric=writer.record,
    )
    assert out.returncode == 0
    writer.flush()
    points = history.read(redis_client, JOB)
    assert [(p["step"], p["loss"], p["run"]) for p in points] == [
        (1, 1.0, 3),
        (2, 0.5, 3),
        (3, 1 / 3, 3),
    ]


def test_the_bundle_holds_the_folded_history_as_metrics_jsonl(redis_client, tmp_path):
    history.append(
        redis_client,
        JOB,
        [
            {"step": 1, "t": 1.0, "run": 1, "loss": 3.0},
            {"step": 2, "t": 2.0, "run": 1, "loss": 2.0},
            {"step": 2, "t": 3.0, "run": 2, "loss": 2.5},
        ],
    )
    work = tmp_path / "work"
    (work / workdirs.OUT_DIR).mkdir(parents=True)
    (work / workdirs.OUT_DIR / "model.txt").write_text("m")
    (work / workdirs.LOG_FILE).write_text("log\n")
    upload.write_history(redis_client, JOB, work, threading.Event())
    job = JobSpec(name="j", job_id=JOB, model="mlp")
    result = bundle(upload.files(job, work), {"job_id": JOB}, tmp_path / "b.tar.zst")
    raw = (
        zstandard.ZstdDecompressor()
        .decompressobj()
        .decompress((tmp_path / "b.tar.zst").read_bytes())
    )
    with tarfile.open(fileobj=io.BytesIO(raw)) as tar:
        lines = tar.extractfile(workdirs.HISTORY_FILE).read().decode().splitlines()
    assert workdirs.HISTORY_FILE in result.files
    assert [json.loads(line)["loss"] for line in lines] == [3.0, 2.5]


def test_points_wait_in_the_worker_while_redis_is_away_and_go_with_the_next_flush(redis_client):
    import redis
    from redis.backoff import NoBackoff
    from redis.retry import Retry

    away = redis.Redis(port=1, socket_connect_timeout=0.2, retry=Retry(NoBackoff(), 0))
    writer = MetricHistory(away, JOB, run=1)
    record(writer, {"epoch": 1, "loss": 2.0})
    assert writer.flush() is False
    record(writer, {"epoch": 2, "loss": 1.0})
    writer.r = redis_client  # Redis is back (a failover's new master, say)
    assert writer.flush() is True
    assert [(p["step"], p["loss"]) for p in history.read(redis_client, JOB)] == [(1, 2.0), (2, 1.0)]


def test_a_dead_runs_last_lines_from_its_log_complete_the_history_without_repeating_a_step(
    redis_client,
):
    from tasks.metrichistory import complete

    reports = [{"epoch": e, "loss": 1.0 / e} for e in (1, 2, 3, 4)] + [{"done": 1}]
    writer = MetricHistory(redis_client, JOB, run=2)
    for i, r in enumerate(reports[:2], start=1):  # sent at its last tick; then the worker died
        record(writer, r, i)
    writer.flush()
    assert complete(redis_client, JOB, 2, reports, at=50.0) == 3
    points = history.read(redis_client, JOB)
    assert [p["step"] for p in points] == [1, 2, 3, 4, 5] and redis_client.llen(
        history.key(JOB)
    ) == 5
    assert points[3]["t"] == 50.0 and points[0]["t"] != 50.0
    assert complete(redis_client, JOB, 2, reports, at=60.0) == 0  # a second start adds nothing
