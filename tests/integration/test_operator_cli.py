"""The operator's verbs on a real Redis and a real S3 endpoint: logs kept bounded and
followed across a re-run, get verifying and refusing a tampered bundle, artifacts with a
corrupt meta.json, short ID prefixes, cancel and requeue of a whole sweep, status filters,
and a kept local fleet stopped by its own command."""

import io
import json
import tarfile
import threading
import time
from pathlib import Path

import pytest
import redis as redis_lib
import zstandard

from artifacts.bundle import bundle, sha256_file
from artifacts.stores import FileStore
from core import constants as C
from fleet.query import logs as L
from state.jobrecord import JobState, record_end
from state.records import Records
from tasks.joblog import JobLog
from tasks.run import RunEnd
from tests.waiting import wait_until

pytestmark = pytest.mark.integration

SWEEP = """
[[jobs]]
name = "gbt-x"
command = ["true"]
[jobs.sweep]
seed = [{seeds}]

[[jobs]]
name = "gbt-x-other"
command = ["true", "other"]
"""


@pytest.fixture
def sweep(fleet_cli, tmp_path, capsys):
    """25 queued jobs gbt-x[seed=0..24] and one gbt-x-other; returns name -> job ID."""
    path = tmp_path / "sweep.toml"
    path.write_text(SWEEP.format(seeds=", ".join(str(i) for i in range(25))))
    assert fleet_cli(["publish", str(path), "--json"]) == 0
    return {r["name"]: r["job_id"] for r in json.loads(capsys.readouterr().out)}


def finish(client, job_id: str, state: str, **fields) -> None:
    client.hset(
        C.JOB_KEY + job_id,
        mapping={
            "state": state,
            "started_at": time.time() - 5,
            "finished_at": time.time(),
            **fields,
        },
    )


# --- logs ---------------------------------------------------------------------------
def test_job_output_in_redis_stays_bounded_clipped_and_expiring(redis_client):
    with JobLog(redis_client, "j1", run=1, worker="w", max_lines=1000, every_s=0.05) as out:
        for i in range(5000):
            out.append(f"line {i}")
        out.append("x" * 10_000)
    entries = L.read(redis_client, "j1")
    assert 1000 <= len(entries) <= 1200  # XADD MAXLEN ~ trims whole nodes
    assert [e.line for e in entries[-3:-1]] == [
        "line 4999",
        "x" * (C.JOB_LOG_MAX_LINE_CHARS - 1) + "…",
    ]
    assert entries[-1].event == "end" and entries[-1].worker == "w"
    assert 0 < redis_client.ttl(L.key("j1")) <= C.JOB_LOG_TTL_S


def test_lines_go_to_redis_in_a_batch_per_flush_not_one_round_trip_each(redis_client):
    with JobLog(redis_client, "j2", run=1, worker="w", every_s=0.5) as out:
        for i in range(100):
            out.append(f"line {i}")
        assert redis_client.xlen(L.key("j2")) == 0  # nothing sent yet: buffered
        wait_until("a flush", lambda: redis_client.xlen(L.key("j2")) >= 101, 5, every_s=0.05)
        assert redis_client.xlen(L.key("j2")) == 101  # start mark + 100 lines, at once


def test_output_waits_in_the_buffer_while_redis_is_away_and_goes_when_it_is_back(redis_client):
    away = redis_lib.Redis(port=1, socket_connect_timeout=0.2)
    out = JobLog(away, "j3", run=1, worker="w")
    for i in range(10):
        out.append(f"line {i}")
    assert out.flush() is False
    out.r = redis_client
    assert out.flush() is True
    assert [e.line for e in L.read(redis_client, "j3")] == [f"line {i}" for i in range(10)]


def test_follow_goes_on_into_a_rerun_and_ends_once_the_job_is_finished(redis_client):
    state = {"now": JobState.RUNNING}

    def worker():
        with JobLog(redis_client, "j4", run=1, worker="a", every_s=0.05) as out:
            out.append("first run")
        state["now"] = JobState.QUEUED  # a lost lease: back to the queue
        time.sleep(1.5)
        with JobLog(redis_client, "j4", run=2, worker="b", every_s=0.05) as out:
            out.append("second run")
            time.sleep(0.3)
            out.append("last line")
        state["now"] = JobState.SUCCEEDED

    t = threading.Thread(target=worker)
    t.start()
    got = [e.text() for e in L.follow(redis_client, "j4", "-", lambda: state["now"], block_ms=200)]
    t.join()
    assert [g.split(" 20")[0] for g in got] == [
        "--- attempt 1 on a started",
        "first run",
        "--- attempt 1 on a ended",
        "--- attempt 2 on b started",
        "second run",
        "last line",
        "--- attempt 2 on b ended",
    ]


def test_a_run_left_by_an_exception_is_marked_lost_and_one_that_ended_says_how(redis_client):
    with JobLog(redis_client, "j5", run=2, worker="a") as out:
        out.end(RunEnd.FAILED, "exit 1\nmore")
    with pytest.raises(RuntimeError):
        with JobLog(redis_client, "j5", run=3, worker="a"):
            raise RuntimeError("disk gone")
    ends = [e for e in L.read(redis_client, "j5") if e.event == "end"]
    assert [(e.run, e.outcome, e.detail) for e in ends] == [
        (2, "failed", "exit 1"),
        (3, "lost", "RuntimeError on the worker: disk gone"),
    ]


def test_follow_waits_for_the_end_mark_of_a_run_whose_job_was_cancelled_before_it_heard(
    redis_client,
):
    state = {"now": JobState.RUNNING}
    out = JobLog(redis_client, "j6", run=1, worker="a", every_s=0.05).__enter__()
    out.append("working")

    def worker():
        time.sleep(0.5)
        state["now"] = JobState.CANCELLED  # the operator's cancel, recorded at once
        time.sleep(1.5)  # the run hears of it on a heartbeat
        out.end(RunEnd.CANCELLED)
        out.__exit__(None, None, None)

    t = threading.Thread(target=worker)
    t.start()
    got = list(L.follow(redis_client, "j6", "-", lambda: state["now"], block_ms=200))
    t.join()
    assert [e.line or e.outcome or e.event for e in got] == ["start", "working", "cancelled"]
    # a run whose end mark never comes (its worker died) is waited for a bounded time only
    redis_client.xadd(L.key("j6"), {"ev": "start", "run": "2", "worker": "b"})
    t0 = time.monotonic()
    after = list(
        L.follow(
            redis_client, "j6", got[-1].id, lambda: JobState.FAILED, block_ms=100, end_wait_s=0.5
        )
    )
    assert [e.event for e in after] == ["start"] and time.monotonic() - t0 < 3


def test_fleet_logs_prints_a_jobs_output_and_says_why_when_none_is_kept(
    fleet_cli, sweep, redis_client, capsys
):
    with JobLog(redis_client, sweep["gbt-x[seed=3]"], run=1, worker="cpu-1") as out:
        out.append("hello from seed 3")
    assert fleet_cli(["logs", "gbt-x[seed=3]"]) == 0
    assert "hello from seed 3" in capsys.readouterr().out
    assert fleet_cli(["logs", "gbt-x[seed=4]"]) == 0
    assert "no output kept for gbt-x[seed=4]" in capsys.readouterr().err
    assert fleet_cli(["logs", "gbt-x[seed=3]", "--json"]) == 0
    lines = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert lines[1]["line"] == "hello from seed 3" and lines[0]["event"] == "start"


# --- get ----------------------------------------------------------------------------
def stored_job(store, client, tmp_path, job_id: str, name: str) -> tuple[str, str]:
    src = tmp_path / f"src-{name}"
    (src / "out").mkdir(parents=True)
    (src / "out" / "model.txt").write_text(f"model of {name}")
    made = bundle(
        [("out/model.txt", src / "out" / "model.txt")],
        {"job_id": job_id, "name": name},
        tmp_path / f"{name}.tar.zst",
    )
    art = store.put_bundle("command", made.path, made.sha256, {"job_id": job_id, "name": name})
    finish(
        client,
        job_id,
        "succeeded",
        artifact=json.dumps({"uri": art.uri, "sha256": art.sha256, "size": art.size}),
    )
    return art.uri, art.sha256


def test_get_downloads_verifies_and_extracts_a_jobs_bundle_from_s3(
    fleet_cli, sweep, s3_store, s3_env, redis_client, tmp_path, capsys
):
    jid = sweep["gbt-x[seed=1]"]
    _, sha = stored_job(s3_store, redis_client, tmp_path, jid, "gbt-x[seed=1]")
    out = tmp_path / "got"
    assert fleet_cli(["get", jid[:6], "-o", str(out), "--extract", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["sha256"] == sha and report["verified"] is True
    assert (out / "gbt-x.seed=1" / "out" / "model.txt").read_text() == "model of gbt-x[seed=1]"
    assert sorted(report["files"]) == ["meta.json", "out/model.txt"]


def test_get_refuses_a_tampered_bundle_and_writes_nothing(
    fleet_cli, sweep, s3_store, s3_env, redis_client, tmp_path, capsys
):
    jid = sweep["gbt-x[seed=2]"]
    _, sha = stored_job(s3_store, redis_client, tmp_path, jid, "gbt-x[seed=2]")
    key = s3_store.bundle_key("command", sha)
    s3_store._client.put_object(Bucket=s3_store.bucket, Key=key, Body=b"not the bundle you stored")
    out = tmp_path / "got"
    assert fleet_cli(["get", "gbt-x[seed=2]", "-o", str(out), "--extract"]) == 1
    err = capsys.readouterr().err
    assert "refused gbt-x[seed=2]'s bundle" in err and f"expected sha256 {sha}" in err
    assert list(out.iterdir()) == []


def crafted_bundle(path: Path, names: list[str]) -> Path:
    """A tar.zst holding a regular file under each of `names`, in order, as no bundler writes it."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tar:
        for name in names:
            info = tarfile.TarInfo(name)
            info.size = 4
            tar.addfile(info, io.BytesIO(b"data"))
    path.write_bytes(zstandard.ZstdCompressor().compress(raw.getvalue()))
    return path


def test_get_extract_of_a_bundle_with_a_file_and_a_path_below_it_says_so_without_a_traceback(
    fleet_cli, sweep, redis_client, tmp_path, capsys
):
    store = FileStore(tmp_path / "store")
    evil = crafted_bundle(tmp_path / "evil.tar.zst", ["x", "x/y"])
    sha = sha256_file(evil)
    art = store.put_bundle("command", evil, sha, {})
    jid = sweep["gbt-x[seed=3]"]
    finish(
        redis_client,
        jid,
        "succeeded",
        artifact=json.dumps({"uri": art.uri, "sha256": sha, "size": art.size}),
    )
    out = tmp_path / "got"
    assert fleet_cli(["get", jid, "-o", str(out), "--extract"]) == 1
    err = capsys.readouterr().err
    assert "bundle member 'x/y': 'x' is a file" in err and "Traceback" not in err
    assert [p.name for p in out.iterdir()] == ["gbt-x.seed=3.tar.zst"]


def test_get_of_a_job_without_an_artifact_says_it_has_none(fleet_cli, sweep, capsys):
    assert fleet_cli(["get", "gbt-x-other"]) == 1
    assert (
        "gbt-x-other" in (err := capsys.readouterr().err) and "is queued and has no artifact" in err
    )


# --- artifacts ------------------------------------------------------------------------
@pytest.mark.parametrize("backend", ["file", "s3"])
def test_artifacts_lists_past_a_corrupt_meta_json_with_a_warning_naming_it(
    fleet_cli, redis_client, tmp_path, s3_store, s3_env, capsys, backend
):
    store = FileStore(tmp_path / "store") if backend == "file" else s3_store
    url = (
        (tmp_path / "store").as_uri()
        if backend == "file"
        else f"s3://{s3_store.bucket}/{s3_store.prefix}"
    )
    _, good = stored_job(store, redis_client, tmp_path, "a" * 64, "good")
    _, bad = stored_job(store, redis_client, tmp_path, "b" * 64, "bad")
    if backend == "file":
        (tmp_path / "store" / store.meta_key("command", bad)).write_text("{not json")
    else:
        s3_store._client.put_object(
            Bucket=s3_store.bucket, Key=store.meta_key("command", bad), Body=b"{not json"
        )
    assert fleet_cli(["artifacts", "--store", url, "--json"]) == 0
    out = capsys.readouterr()
    listing = json.loads(out.out)
    assert {a["sha256"] for a in listing["artifacts"]} == {good, bad}
    [warning] = listing["warnings"]
    assert store.meta_key("command", bad) in warning and "unreadable" in warning
    assert "warning: " in out.err and store.meta_key("command", bad) in out.err


def test_artifacts_rehashes_bundles_only_when_asked(fleet_cli, redis_client, tmp_path, capsys):
    store = FileStore(tmp_path / "store")
    _, sha = stored_job(store, redis_client, tmp_path, "c" * 64, "corrupt-later")
    (tmp_path / "store" / store.bundle_key("command", sha)).write_bytes(b"rotten")
    url = (tmp_path / "store").as_uri()
    assert fleet_cli(["artifacts", "--store", url, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["artifacts"][0]["verified"] is None
    assert fleet_cli(["artifacts", "--store", url, "--verify", "--json"]) == 1
    assert json.loads(capsys.readouterr().out)["artifacts"][0]["verified"] is False


# --- show: short prefixes ---------------------------------------------------------------
@pytest.mark.parametrize("verb", ["show", "why"])  # why too: one resolver for every verb
def test_show_takes_a_unique_four_character_prefix(fleet_cli, sweep, capsys, verb):
    ids = list(sweep.values())
    jid = next(j for j in ids if sum(o.startswith(j[:4]) for o in ids) == 1)
    assert fleet_cli([verb, jid[:4], "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["job_id"] == jid


@pytest.mark.parametrize("verb", ["show", "why"])  # why said "no job" of an ambiguous prefix
def test_show_of_an_ambiguous_prefix_lists_the_candidates(fleet_cli, redis_client, capsys, verb):
    for jid, name in (("beef01" + "0" * 58, "one"), ("beef02" + "0" * 58, "two")):
        redis_client.hset(C.JOB_KEY + jid, mapping={"job_id": jid, "name": name, "state": "queued"})
    assert fleet_cli([verb, "beef"]) == 1
    err = capsys.readouterr().err
    assert "ID prefix 'beef' matches 2 jobs: beef01000000 beef01" in err and "beef02000000" in err


# --- cancel / requeue -------------------------------------------------------------------
def test_cancel_of_a_sweep_above_the_threshold_needs_yes_when_not_interactive(
    fleet_cli, sweep, redis_client, capsys
):
    assert fleet_cli(["cancel", "gbt-x"]) == 2  # a usage error: nothing was done
    assert "'gbt-x' matches 25 jobs (more than 20); add --yes" in capsys.readouterr().err
    assert Records(redis_client).states(sweep.values()) == {
        j: JobState.QUEUED for j in sweep.values()
    }


def test_cancel_by_sweep_name_cancels_every_point_and_nothing_else(
    fleet_cli, sweep, redis_client, capsys
):
    assert fleet_cli(["cancel", "gbt-x", "--yes", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["matched"] == [{"ref": "gbt-x", "how": "sweep", "jobs": 25}]
    assert len(report["done"]) == 25 and {d["was"] for d in report["done"]} == {"queued"}
    states = Records(redis_client).states(sweep.values())
    assert states.pop(sweep["gbt-x-other"]) is JobState.QUEUED
    assert set(states.values()) == {JobState.CANCELLED}


def test_cancel_again_reports_what_it_skipped_and_why(fleet_cli, sweep, capsys):
    fleet_cli(["cancel", "gbt-x[seed=1*", "--json"])
    capsys.readouterr()
    assert fleet_cli(["cancel", "gbt-x[seed=1*", "gbt-x[seed=20]"]) == 0
    out = capsys.readouterr().out
    assert "'gbt-x[seed=1*' matched 11 job(s) by glob" in out
    assert (
        "cancelled 1:\n  gbt-x[seed=20]" in out
        and "skipped 11:" in out
        and "already cancelled" in out
    )


def test_requeue_by_glob_runs_only_finished_jobs_again_and_says_why_others_were_skipped(
    fleet_cli, sweep, redis_client, capsys
):
    finish(redis_client, sweep["gbt-x[seed=5]"], "failed", last_error="boom")
    assert fleet_cli(["requeue", "gbt-x[seed=5]", "gbt-x[seed=6]", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert [d["name"] for d in report["done"]] == ["gbt-x[seed=5]"] and report["done"][0][
        "was"
    ] == "failed"
    [skipped] = report["skipped"]
    assert (
        skipped["name"] == "gbt-x[seed=6]" and "is queued: requeue runs a failed" in skipped["why"]
    )


def test_a_reference_that_names_nothing_is_reported_and_fails(fleet_cli, sweep, capsys):
    assert fleet_cli(["cancel", "gbt-y"]) == 1
    assert "gbt-y: no job named 'gbt-y'" in capsys.readouterr().err


# --- status -----------------------------------------------------------------------------
def test_status_json_filters_by_state_name_and_host_and_counts_the_matches(
    fleet_cli, sweep, redis_client, capsys
):
    finish(
        redis_client,
        sweep["gbt-x[seed=7]"],
        "failed",
        worker="cpu-9",
        last_error="job gbt-x (abc) exited with status 1; last output:\nKeyError: 'label'",
        **record_end(RunEnd.FAILED, "exit 1: KeyError: 'label'", "KeyError: 'label'"),
    )
    assert (
        fleet_cli(["status", "--json", "--state", "failed", "--name", "gbt-x", "--host", "cpu-*"])
        == 0
    )
    v = json.loads(capsys.readouterr().out)
    assert v["total"] == 26 and v["matched"] == 1 and v["counts"]["failed"] == 1
    assert v["jobs"][0]["error_line"] == "exit 1: KeyError: 'label'"


def test_status_caps_its_table_and_says_how_many_it_left_out(fleet_cli, sweep, capsys):
    assert fleet_cli(["status", "--limit", "5"]) == 0
    out = capsys.readouterr().out
    assert "26 jobs: 26 queued" in out and "5 of 26 shown" in out and "waiting" in out


# --- local --keep ------------------------------------------------------------------------
def test_a_kept_fleet_prints_its_exports_and_its_stop_command_stops_it(tmp_path):
    from rich.console import Console

    from fleet import kept
    from fleet.redis_server import RedisServer, is_up

    server = RedisServer(tmp_path / "redis").start()
    try:
        console = Console(record=True, width=300)
        state = kept.save(
            tmp_path,
            server,
            {},
            {
                "FLEET_BROKER_URL": server.url,
                "FLEET_STORE_URL": "file:///s",
                "AWS_SECRET_ACCESS_KEY": "never-printed",
            },
        )
        kept.announce(state, console)
        text = console.export_text()
        assert f"export FLEET_BROKER_URL={server.url} FLEET_STORE_URL=file:///s" in text
        assert f"local --stop --root {tmp_path}" in text and "never-printed" not in text
        assert kept.stop(tmp_path, console) == 0
        assert not is_up(server.url) and not (tmp_path / kept.STATE_FILE).exists()
    finally:
        server.stop(kill=True)


def test_why_accepts_a_sweeps_base_name_as_cancel_and_requeue_do(fleet_cli, sweep, capsys):
    assert fleet_cli(["why", "gbt-x"]) == 0
    out = capsys.readouterr().out
    assert "'gbt-x' is a sweep" in out and "gbt-x[seed=0]" in out and "gbt-x-other" not in out
    assert fleet_cli(["why", "gbt-x", "--json"]) == 0
    reports = json.loads(capsys.readouterr().out)
    assert len(reports) == 20 and all(r["name"].startswith("gbt-x[seed=") for r in reports)


def test_artifacts_marks_the_bundle_a_rerun_job_names_now_and_names_the_store(
    fleet_cli, sweep, redis_client, tmp_path, capsys
):
    store = FileStore(tmp_path / "store")
    jid = sweep["gbt-x[seed=3]"]
    (tmp_path / "run2").mkdir()
    _, first = stored_job(store, redis_client, tmp_path, jid, "gbt-x[seed=3]")
    _, second = stored_job(store, redis_client, tmp_path / "run2", jid, "gbt-x[seed=3] run 2")
    url = (tmp_path / "store").as_uri()
    assert fleet_cli(["artifacts", "--store", url, "--json"]) == 0
    current = {a["sha256"]: a["current"] for a in json.loads(capsys.readouterr().out)["artifacts"]}
    assert current == {first: False, second: True}
    assert fleet_cli(["artifacts", "--store", url]) == 0
    out = capsys.readouterr().out
    assert f"2 artifact(s) in {url}" in out and "current" in out and "older" in out


def test_a_local_runs_table_lists_its_own_jobs_bundles_and_counts_the_rest(
    sweep, redis_client, tmp_path
):
    from rich.console import Console

    from fleet.cli.artifacts import artifacts_table
    from fleet.query.artifacts import listing, mark_current

    store = FileStore(tmp_path / "store")
    mine, theirs = sweep["gbt-x[seed=3]"], [sweep[f"gbt-x[seed={i}]"] for i in (4, 5)]
    shas = []
    for i, jid in enumerate([mine, *theirs]):
        (tmp_path / f"r{i}").mkdir()
        shas.append(stored_job(store, redis_client, tmp_path / f"r{i}", jid, f"job {i}")[1])
    current = {mine: shas[0]}
    v = mark_current(listing(store, verify=True, jobs=set(current)), current)
    assert [(r.job_id, r.verified, r.current) for r in v.rows] == [(mine, True, True)]
    assert v.others == 2  # counted, neither read nor verified
    console = Console(width=200, record=True)
    console.print(artifacts_table(v, "the local store"))
    title = "1 artifact(s) in the local store (2 more of other jobs: fleet artifacts lists them)"
    assert title in console.export_text()


# --- one resolver for every verb ------------------------------------------------------------
EDITED = '[[jobs]]\nname = "edited"\ncommand = ["true", "{v}"]\n'


def test_show_logs_get_and_why_of_a_name_two_jobs_share_say_which_and_how_to_reach_the_other(
    fleet_cli, tmp_path, capsys
):
    ids = []
    for v in ("v1", "v2"):  # an edit keeps the name and makes a new job
        path = tmp_path / f"{v}.toml"
        path.write_text(EDITED.format(v=v))
        assert fleet_cli(["publish", str(path), "--json"]) == 0
        ids += [r["job_id"] for r in json.loads(capsys.readouterr().out)]
    old, new = ids
    for verb in ("show", "logs", "why", "get"):
        fleet_cli([verb, "edited"] + (["-o", str(tmp_path / "got")] if verb == "get" else []))
        err = " ".join(capsys.readouterr().err.split())
        assert (
            f"note: 2 jobs are named 'edited'; this is {new[:12]}, the one published last; "
            f"for the other: `fleet {verb} {old[:12]}`"
        ) in err, (verb, err)


def test_show_is_readable_by_default_and_json_with_json(fleet_cli, sweep, capsys):
    assert fleet_cli(["show", "gbt-x-other"]) == 0
    out = capsys.readouterr().out
    assert (
        out.startswith(f"gbt-x-other ({sweep['gbt-x-other']})")
        and "state" in out
        and "queued" in out
    )
    assert fleet_cli(["show", "gbt-x-other", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["state"] == "queued"
