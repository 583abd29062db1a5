"""Flower tells the truth: a real Flower process (with its password) watching real workers.

Names, queued jobs, progress, REVOKED after cancel, the Broker page with queue depths,
worker capability, Prometheus metrics, and Terminate followed by requeue running once.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from pathlib import Path

import psutil
import pytest
import redis

from fleet.local import start_worker, stop_worker
from fleet.redis_server import RedisServer
from state.jobrecord import JobState
from tests.harness.cli import CLI_HANG_S
from tests.harness.flower import PASSWORD, ROOT, USER, Watched, start_flower, stop_flower
from tests.harness.workers import CPU, CUDA_LARGE, wait_for_workers
from tests.needs import missing
from tests.waiting import wait_until

pytestmark = pytest.mark.e2e
GHOST = ["ghost-host"]  # allowed_hosts no worker has: the job waits in its queue


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def chromium(url: str, screenshot: Path) -> str:
    """Load ``url`` in headless Chromium: save a screenshot, return the DOM after scripts ran."""
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if not browser:
        missing("chromium is not installed (Debian: apt-get install chromium)")
    flags = [
        browser,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={screenshot.parent / 'chromium-profile'}",
        "--window-size=1400,1000",
        "--virtual-time-budget=8000",
    ]
    run_browser([*flags, f"--screenshot={screenshot}", url])
    dom = run_browser([*flags, "--dump-dom", url])
    keep = os.environ.get("FLEET_SCREENSHOT_DIR")  # to look at what an operator sees
    if keep:
        shutil.copy(screenshot, Path(keep) / screenshot.name)
    return dom


def run_browser(argv: list[str], timeout_s: float = 120) -> str:
    """Run Chromium in its own process group, and leave none of its processes behind."""
    proc = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, start_new_session=True
    )
    try:
        out, _ = proc.communicate(timeout=timeout_s)
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()
    assert proc.returncode == 0, f"{argv[0]} exited {proc.returncode}"
    return out


@pytest.fixture(scope="module")
def flower(tmp_path_factory):
    root = tmp_path_factory.mktemp("flower")
    (root / "counts").mkdir()
    (root / "logs").mkdir()
    server = RedisServer(root / "redis").start()
    port = free_port()
    env = dict(
        os.environ,
        FLEET_BROKER_URL=server.url,
        FLEET_STORE_URL=f"file://{root / 'store'}",
        FLEET_LEASE_TTL_S="5",
        COUNT_DIR=str(root / "counts"),
        FLOWER_BASIC_AUTH=f"{USER}:{PASSWORD}",
    )
    for var in ("FLEET_CAPABILITY", "FLOWER_UNAUTHENTICATED", "FLOWER_ADDRESS"):
        env.pop(var, None)
    workers = {
        n: start_worker(n, c, env, root / "logs")
        for n, c in (("fl-cpu", CPU), ("fl-large", CUDA_LARGE))
    }
    proc = start_flower(env, port, root / "logs" / "flower.log")
    w = Watched(env, f"http://127.0.0.1:{port}", root, server.url, proc.pid)
    try:
        wait_for_workers(env, workers)

        def healthy():
            assert proc.poll() is None, f"Flower exited\n{w.logs()}"
            return w.up()

        wait_until("Flower starts", healthy, 120, w.logs, every_s=0.3)
        # Flower learns the workers (and their queues) from its first inspect round
        saw = lambda: '"fl-cpu@' in w.http("/api/workers?refresh=1")[1]  # noqa: E731
        wait_until("Flower sees the workers", saw, 60, w.logs, every_s=0.5)
        yield w
    finally:
        stop_flower(proc)
        for p in workers.values():
            stop_worker(p)
        server.stop()


def test_flower_refuses_to_start_without_a_password(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLOWER_")}
    out = subprocess.run(
        [sys.executable, "-m", "celery", "-A", "tasks", "flower", f"--port={free_port()}"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=CLI_HANG_S,
    )
    assert out.returncode != 0
    assert "refusing to start Flower without authentication" in out.stderr + out.stdout
    assert "FLOWER_BASIC_AUTH" in out.stderr + out.stdout


def test_the_api_answers_401_without_the_password_and_200_with_it(flower):
    assert flower.http("/api/workers", auth=False)[0] == 401
    assert flower.http("/", auth=False)[0] == 401
    assert flower.http("/api/workers")[0] == 200


def test_flower_listens_only_on_loopback_by_default(flower):
    port = int(flower.url.rsplit(":", 1)[1])
    listening = [
        c.laddr
        for p in [psutil.Process(flower.flower_pid)]
        for c in p.net_connections(kind="inet")
        if c.status == psutil.CONN_LISTEN
    ]
    assert [a.ip for a in listening if a.port == port] == ["127.0.0.1"]


def test_a_published_job_is_listed_with_its_name_and_queue_before_any_worker_takes_it(flower):
    ids = flower.publish({"waits[seed=1]": 1}, "--owner", "dave", allowed_hosts=GHOST)
    task = flower.wait_task(ids["waits[seed=1]"], lambda t: t.get("name") == "waits[seed=1]")
    assert task["state"] == "PENDING" and task["kwargs"] == "{'owner': 'dave'}"  # who published it
    assert task["routing_key"].startswith("cpu.")  # its constraint queue


def test_the_broker_page_shows_every_tier_queue_with_its_depth_across_priorities(flower):
    ids = {}
    for pri in (0, 5, 9):  # three of kombu's priority sub-lists of one queue
        ids.update(flower.publish({f"deep-{pri}": 1}, allowed_hosts=["deep-host"], priority=pri))
    queue = flower.records().get(ids["deep-0"]).queue
    code, page = flower.http("/broker")
    assert code == 200
    row = page.split(f'<tr id="{queue}">', 1)[1].split("</tr>", 1)[0]
    assert '<td class="broker-secondary-column">3</td>' in row.replace("\n", "")
    for tier in ("cuda-large", "cuda", "cpu"):
        assert f'<tr id="{tier}">' in page


def test_a_job_cancelled_while_queued_ends_revoked_in_flower_and_the_result_backend(flower):
    ids = flower.publish({"cancel-me": 1}, allowed_hosts=GHOST)
    jid = ids["cancel-me"]
    flower.wait_task(jid, lambda t: t.get("state") == "PENDING")
    out = flower.fleet("cancel", jid)
    assert out.returncode == 0, out.stderr
    flower.wait_task(jid, lambda t: t.get("state") == "REVOKED")
    assert flower.backend_state(jid) == "REVOKED"


def test_flowers_revoke_button_cancels_a_queued_fleet_job(flower):
    jid = flower.publish({"revoke-me": 1}, allowed_hosts=GHOST)["revoke-me"]
    flower.wait_task(jid, lambda t: t.get("state") == "PENDING")
    assert flower.http(f"/api/task/revoke/{jid}", method="POST")[0] == 200
    flower.wait_state(jid, JobState.CANCELLED, timeout_s=30)
    flower.wait_task(jid, lambda t: t.get("state") == "REVOKED")


def test_terminate_then_requeue_runs_the_job_once_all_the_way_with_its_name_and_progress(
    flower, tmp_path
):
    name, gate = "term[seed=2]", tmp_path / "gate"
    # held until requeued: still running when `celery control`, slow to start on a loaded
    # machine, terminates it; the job's length is not what this test is about
    jid = flower.publish({name: f"until:{gate}"})[name]
    running = flower.wait_task(
        jid, lambda t: t.get("state") == "STARTED" and "running" in str(t.get("result"))
    )
    assert running["name"] == name
    assert "last: sleeping" in running["result"]
    out = subprocess.run(
        [sys.executable, "-m", "celery", "-A", "tasks", "control", "terminate", "SIGTERM", jid],
        env=flower.env,
        capture_output=True,
        text=True,
        timeout=CLI_HANG_S,
        cwd=ROOT,
    )
    assert out.returncode == 0, out.stderr
    flower.wait_state(jid, JobState.CANCELLED, timeout_s=60)
    flower.wait_task(jid, lambda t: t.get("state") == "REVOKED", timeout_s=60)
    assert flower.backend_state(jid) == "REVOKED"
    assert flower.runs(name, "done") == 0

    out = flower.fleet("requeue", jid)
    assert out.returncode == 0, out.stderr
    assert flower.wait_task(jid, lambda t: t.get("state") != "REVOKED", timeout_s=60)["state"] in (
        "PENDING",
        "RECEIVED",
        "STARTED",
    )
    gate.touch()
    rec = flower.wait_state(jid, JobState.SUCCEEDED, timeout_s=90)
    assert rec.attempts == 1
    done = flower.wait_task(jid, lambda t: t.get("state") == "SUCCESS")
    assert done["name"] == name
    assert (flower.runs(name, "start"), flower.runs(name, "done")) == (2, 1)
    assert flower.backend_state(jid) == "SUCCESS"
    assert "pidbox command error" not in flower.logs()


def test_a_requeued_job_an_idle_worker_takes_at_once_shows_started_then_success_with_its_times(
    flower, tmp_path
):
    name, gate = "again[seed=5]", tmp_path / "gate"
    gate.touch()  # the first run ends at once; the second holds until it was seen running
    jid = flower.publish({name: f"until:{gate}"})[name]
    first = flower.wait_task(jid, lambda t: t.get("state") == "SUCCESS")
    gate.unlink()
    out = flower.fleet("requeue", jid)  # the workers idle on their queues: one takes it at once
    assert out.returncode == 0, out.stderr
    running = flower.wait_task(
        jid,
        lambda t: t.get("state") == "STARTED" and "running" in str(t.get("result")),
        timeout_s=60,
    )
    assert running["started"] and running["started"] > first["started"]
    gate.touch()
    done = flower.wait_task(jid, lambda t: t.get("state") == "SUCCESS")
    assert done["received"] and done["started"] and done["started"] > first["started"]
    assert (flower.runs(name, "done"), flower.records().get(jid).attempts) == (2, 1)


def test_publish_force_shows_the_new_run_not_the_old_success(flower, tmp_path):
    name, gate = "forced[seed=4]", tmp_path / "gate"
    gate.touch()  # the first run ends at once; the forced one holds until it was seen
    jid = flower.publish({name: f"until:{gate}"})[name]
    flower.wait_task(jid, lambda t: t.get("state") == "SUCCESS")
    gate.unlink()
    assert flower.publish({name: f"until:{gate}"}, "--force", name)[name] == jid
    rerun = flower.wait_task(jid, lambda t: t.get("state") != "SUCCESS", timeout_s=60)
    assert rerun["state"] in ("PENDING", "RECEIVED", "STARTED")
    assert rerun.get("result") is None or rerun["result"].startswith("running")  # not the old run's
    gate.touch()
    done = flower.wait_task(jid, lambda t: t.get("state") == "SUCCESS")
    assert done["received"] and done["started"]  # the new run's, not cleared by a late reset
    assert (flower.runs(name, "done"), flower.records().get(jid).state) == (2, JobState.SUCCEEDED)


# the second attempt runs until the test saw it started (COUNT_DIR/flaky.go; gate.py's limit),
# not for a length that Flower's events may outlast on a busy machine
FLAKY = """
import os, pathlib, sys, time
counts = pathlib.Path(os.environ["COUNT_DIR"])
if not (counts / "flaky.first").exists():
    (counts / "flaky.first").touch()
    sys.exit("first attempt fails")
print("second attempt", flush=True)
deadline = time.monotonic() + 180
while not (counts / "flaky.go").exists() and time.monotonic() < deadline:
    time.sleep(0.1)
"""


def test_a_retried_job_shows_its_new_attempt_started_not_the_previous_failure(flower):
    jid = flower.publish_text(
        f'[[jobs]]\nname = "flaky"\ncommand = ["{sys.executable}", "-c", {json.dumps(FLAKY)}]\n'
        "max_attempts = 2\n"
    )["flaky"]
    again = flower.wait_task(jid, lambda t: t.get("state") == "STARTED" and t.get("retries") == 1)
    (Path(flower.env["COUNT_DIR"]) / "flaky.go").touch()
    assert again.get("exception") is None
    flower.wait_task(jid, lambda t: t.get("state") == "SUCCESS")
    assert flower.records().get(jid).attempts == 2
    # the Workers page's Failed counts what fleet status calls failed: the first attempt was retried
    code, body = flower.http("/workers?json=1")
    assert code == 200, body
    counts = json.loads(body)["data"]
    assert sum(w.get("task-failed", 0) for w in counts) == 0
    assert sum(w.get("task-retried", 0) for w in counts) == 1


def test_each_workers_capability_is_readable_from_celery_inspect_and_from_flower(flower):
    out = subprocess.run(
        [sys.executable, "-m", "celery", "-A", "tasks", "inspect", "capability", "--json"],
        env=flower.env,
        capture_output=True,
        text=True,
        timeout=CLI_HANG_S,
        cwd=ROOT,
    )
    assert out.returncode == 0, out.stderr
    caps = {node.split("@")[0]: cap for node, cap in json.loads(out.stdout).items()}
    assert caps["fl-large"]["gpus"][0]["vram_total_gib"] == 80
    assert caps["fl-large"]["queues"] == ["cuda-large", "cuda", "cpu"]
    assert caps["fl-cpu"]["gpus"] == [] and caps["fl-cpu"]["ram_total_gib"] == 8
    assert caps["fl-cpu"]["cpu_cores"] >= 1
    workers = json.loads(flower.http("/api/workers?refresh=1")[1])
    large = next(v for k, v in workers.items() if k.startswith("fl-large@"))
    assert large["conf"]["fleet_capability"]["gpus"][0]["name"] == "sim-A100-80GB"


def datatable(flower, search: str, length: int = 50) -> list[dict]:
    columns = "name,uuid,state,owner,gpus,received,runtime,worker".split(",")
    query = {
        "draw": 1,
        "start": 0,
        "length": length,
        "search[value]": search,
        "order[0][column]": 5,
        "order[0][dir]": "desc",
        **{f"columns[{i}][data]": c for i, c in enumerate(columns)},
    }
    code, body = flower.http("/tasks/datatable?" + urllib.parse.urlencode(query))
    assert code == 200, body
    return json.loads(body)["data"]


def test_a_waiting_follower_is_pending_in_the_tasks_page_with_what_it_waits_for(flower, tmp_path):
    # its upstream may run on no host (GHOST): the follower waits as long as the test looks
    ids = flower.publish_text(
        '[[jobs]]\nname = "pipe-up"\ncommand = ["true"]\nallowed_hosts = ["ghost-host"]\n'
        '[[jobs]]\nname = "pipe-down"\ncommand = ["echo", "down"]\nafter = ["pipe-up"]\n'
    )
    flower.wait_task(ids["pipe-down"], lambda t: t.get("name") == "pipe-down")
    [row] = [r for r in datatable(flower, "pipe-down") if r["uuid"] == ids["pipe-down"]]
    assert (row["state"], row["waits"]) == ("PENDING", "pipe-up (queued)"), row
    code, page = flower.http(f"/task/{ids['pipe-down']}")
    assert code == 200 and "pipe-up (queued)" in page
    authed = flower.url.replace("http://", f"http://{USER}:{PASSWORD}@")
    listing = chromium(f"{authed}/tasks", tmp_path / "flower-waits.png")
    assert "Waits for" in listing  # the column's header, as an operator sees the page
    row = listing.split(f'id="{ids["pipe-down"]}"', 1)[1].split("</tr>", 1)[0]
    assert "PENDING" in row and "pipe-up (queued)" in row, row


def test_the_tasks_page_rows_carry_the_owner_and_the_gpus_a_running_job_holds(flower, tmp_path):
    name, gate = "owned[seed=6]", tmp_path / "gate"  # held until its row was read
    jid = flower.publish({name: f"until:{gate}"}, "--owner", "erin", require_cuda=True)[name]
    flower.wait_task(
        jid, lambda t: t.get("state") == "STARTED" and "running" in str(t.get("result"))
    )
    row = next(r for r in datatable(flower, name) if r["uuid"] == jid)
    assert (row["owner"], row["gpus"], row["worker"].split("@")[0]) == (
        "erin",
        "GPU 0",
        "fl-large",
    ), row
    gate.touch()
    flower.wait_task(jid, lambda t: t.get("state") == "SUCCESS")


def test_prometheus_metrics_need_the_password_and_count_events_by_job_name(flower):
    flower.wait_task(
        flower.publish({"metered": 0.2})["metered"], lambda t: t.get("state") == "SUCCESS"
    )
    assert flower.http("/metrics", auth=False)[0] == 401
    code, text = flower.http("/metrics")
    assert code == 200
    assert "flower_events_total" in text and 'task="metered"' in text


def test_an_operator_sees_the_running_jobs_name_owner_progress_and_terminate_button_in_a_browser(
    flower, tmp_path
):
    name, gate = "shown[seed=3]", tmp_path / "gate"
    jid = flower.publish({name: f"until:{gate}"}, "--owner", "carol")[name]
    flower.wait_task(
        jid, lambda t: t.get("state") == "STARTED" and "running" in str(t.get("result"))
    )
    # the worker's task-received event carries the message's kwargsrepr: the owner stays shown
    assert flower.wait_task(jid, lambda t: True)["kwargs"] == "{'owner': 'carol'}"
    authed = flower.url.replace("http://", f"http://{USER}:{PASSWORD}@")
    page = chromium(f"{authed}/task/{jid}", tmp_path / "flower-task.png")
    assert name in page and "STARTED" in page and "Terminate" in page and "'owner': 'carol'" in page
    assert "running" in page and "last: sleeping" in page
    listing = chromium(f"{authed}/tasks", tmp_path / "flower-tasks.png")
    assert name in listing and 'id="fleet-style"' in listing  # the short ID's style
    row = listing.split(f'id="{jid}"', 1)[1].split("</tr>", 1)[0]
    assert ">carol<" in row and jid[:8] in row  # the owner column; the short ID
    workers = chromium(f"{authed}/workers", tmp_path / "flower-workers.png")
    assert "fl-large@" in workers and "1 GPU (sim-A100-80GB 80 GiB)" in workers
    node = next(k for k in json.loads(flower.http("/api/workers")[1]) if k.startswith("fl-large@"))
    worker = chromium(f"{authed}/worker/{node}#tab-config", tmp_path / "flower-worker.png")
    assert "fleet_capability" in worker and "sim-A100-80GB" in worker
    assert "1 GPU (sim-A100-80GB 80 GiB)" in worker  # under its name, not only in the Config tab
    assert ".worker-controls-panel" in worker  # Grow, Shrink and Autoscale are hidden
    gate.touch()  # seen running in every page: now it may end
    flower.wait_state(jid, JobState.SUCCEEDED)


def test_a_failed_jobs_exception_reads_with_its_line_breaks_in_a_browser(flower, tmp_path):
    script = "print('first line'); print('second line'); raise SystemExit(3)"
    jid = flower.publish_text(
        f'[[jobs]]\nname = "fails"\ncommand = ["{sys.executable}", "-c", "{script}"]\n'
    )["fails"]
    failed = flower.wait_task(jid, lambda t: t.get("state") == "FAILURE")
    assert failed["exception"].startswith("TrainingFailed: ") and "\\n" not in failed["exception"]
    assert "first line\nsecond line" in failed["exception"]
    authed = flower.url.replace("http://", f"http://{USER}:{PASSWORD}@")
    page = chromium(f"{authed}/task/{jid}", tmp_path / "flower-failed.png")
    row = page.split(">Exception</dt>", 1)[1].split("</dd>", 1)[0]
    assert "white-space: pre-wrap" in row and "first line\nsecond line" in row


SEARCH_CURVES = {  # trial -> (its state, its metric at each step)
    0: ("succeeded", [0.9, 0.5, 0.3, 0.2]),
    1: ("pruned", [1.4, 1.2]),
    2: ("succeeded", [0.8, 0.6, 0.45, 0.4]),
    3: ("failed", [2.0]),
    4: ("running", [0.7, 0.5]),
}


def seed_search(client, name: str, sid: str) -> dict[int, str]:
    """A search as state.search keeps it and its trials' records and metric histories, as
    the workers leave them; trial number -> job ID."""
    from core import constants as C
    from state import history
    from state.search import store as S

    config = {
        "trials": 8,
        "parallel": 2,
        "metric": "loss",
        "direction": "minimize",
        "max_failures": 3,
        "space": {"lr": {"low": 0.01, "high": 1.0, "log": True, "int": False, "step": None}},
    }
    counts = {"succeeded": 2, "pruned": 1, "failed": 1}
    client.hset(
        S.key(sid),
        mapping={
            "id": sid,
            "name": name,
            "config": json.dumps(config),
            "issued": str(len(SEARCH_CURVES)),
            "ended": "4",
            "best_value": "0.2",
            "best_trial": "0",
            **{k: str(v) for k, v in counts.items()},
        },
    )
    client.hset(C.SEARCHES_KEY, name, sid)
    client.sadd(S.key(sid, "live"), "4")
    ids, now = {}, time.time()
    for n, (state, curve) in SEARCH_CURVES.items():
        jid = ids[n] = uuid.uuid4().hex * 2
        client.hset(S.key(sid, "trial", n), mapping={"job_id": jid})
        client.hset(
            C.JOB_KEY + jid,
            mapping={
                "job_id": jid,
                "name": f"{name}[trial={n}]",
                "state": state,
                "worker": "fl-cpu",
                "search": sid,
                "trial": str(n),
                "params": json.dumps({"lr": 0.01 * (n + 1)}),
                "created_at": str(now - 100 + n),
                "started_at": str(now - 90 + n),
                **({"finished_at": str(now - 10 + n)} if state != "running" else {}),
                "spec": json.dumps({"hyper": {"lr": 0.5, "epochs": 4}, "seed": 0}),
            },
        )
        client.zadd(C.JOBS_INDEX, {jid: now - 100 + n})
        client.hset(C.NAMES_INDEX, f"{name}[trial={n}]", jid)
        history.append(
            client,
            jid,
            [{"step": s + 1, "t": now - 80 + s, "run": 1, "loss": v} for s, v in enumerate(curve)],
        )
    return ids


def test_the_live_search_page_draws_the_searchs_records_and_its_new_lines(flower, tmp_path):
    from fleet.query import results
    from state import history

    client = redis.Redis.from_url(flower.redis_url, decode_responses=True)
    ids = seed_search(client, "livetune", "s-live")
    code, body = flower.http("/fleet/api/search/livetune")
    assert code == 200, body
    data = json.loads(body)
    # checked against the records: the leaderboard `fleet results` gives, and the search's own
    board = results.leaderboard(client, "livetune")
    assert [(r["trial"], r["state"], r["value"]) for r in data["leaderboard"]] == [
        (t.trial, t.state, t.value) for t in board.trials
    ]
    assert [r["state"] for r in sorted(data["leaderboard"], key=lambda r: r["trial"])] == [
        client.hget("fleet:job:" + ids[n], "state") for n in sorted(ids)
    ]
    assert data["leaderboard"][0]["trial"] == 0 and data["leaderboard"][0]["best"]
    assert data["budget"] == {
        "trials": 8,
        "parallel": 2,
        "issued": 5,
        "ended": 4,
        "running": 1,
        "queued": 0,
    }
    assert data["failures"] == {"failed": 1, "max": 3} and data["stopped"] == ""
    curves = {c["trial"]: c for c in data["curves"]}
    for n, (_, curve) in SEARCH_CURVES.items():
        assert curves[n]["values"] == curve
        assert curves[n]["steps"] == [
            v for v, _ in history.values(history.read(client, ids[n]), "loss")
        ]
    assert [n for n, c in curves.items() if c["dimmed"]] == [1, 3]
    assert flower.http("/fleet/api/search/livetune", auth=False)[0] == 401
    assert flower.http("/fleet/api/search/no-such-search")[0] == 404

    authed = flower.url.replace("http://", f"http://{USER}:{PASSWORD}@")
    page = chromium(f"{authed}/fleet/search/livetune", tmp_path / "flower-search.png")
    paths = page.count('class="fleet-curve ')
    assert paths == len(SEARCH_CURVES), page[-3000:]
    assert page.count('class="fleet-curve best"') == 1
    assert 'class="fleet-curve best" data-trial="0"' in page
    assert 'class="fleet-curve dimmed" data-trial="1"' in page
    assert 'class="fleet-curve dimmed dot" data-trial="3"' in page  # one step: a dot
    assert data["summary"] in page.replace("&amp;", "&")
    assert 'data-fact="failures">1 failed (the search stops after 3 in a row)' in page
    # params as `fleet results` writes them (4 digits), not a float's 17
    assert ">lr=0.03<" in page and "0.030000000000000002" not in page
    rows = page.split("<tbody>", 1)[1].split("</tbody>", 1)[0]
    assert [int(r.split('data-trial="', 1)[1].split('"', 1)[0]) for r in rows.split("<tr")[1:]] == [
        t.trial for t in board.trials
    ]

    # a running trial prints a line: the JSON the page polls has it at once
    history.append(client, ids[4], [{"step": 3, "t": time.time(), "run": 1, "loss": 0.15}])
    data = json.loads(flower.http("/fleet/api/search/livetune")[1])
    assert {c["trial"]: c for c in data["curves"]}[4]["values"] == [0.7, 0.5, 0.15]
    assert data["leaderboard"][0]["trial"] == 0  # ranked as `fleet results` ranks: done first
    page = chromium(f"{authed}/fleet/search/livetune", tmp_path / "flower-search-2.png")
    assert 'data-trial="4" data-state="running"' in page
    listing = chromium(f"{authed}/fleet/searches", tmp_path / "flower-searches.png")
    assert 'href="/fleet/search/livetune"' in listing
    assert ">livetune</a>: search 4/8" in listing and "livetune: search" not in listing
    tasks = chromium(f"{authed}/tasks", tmp_path / "flower-tasks-nav.png")
    assert 'href="/fleet/searches"' in tasks  # the navigation bar's link


def test_a_flower_started_after_the_jobs_lists_them_from_their_records(flower, tmp_path):
    client = redis.Redis.from_url(flower.redis_url, decode_responses=True)
    ids = seed_search(client, "latetune", "s-late")
    queued = flower.publish({"late-queued": 1}, allowed_hosts=GHOST)["late-queued"]
    port = free_port()
    proc = start_flower(flower.env, port, flower.root / "logs" / "flower-late.log")
    late = Watched(flower.env, f"http://127.0.0.1:{port}", flower.root, flower.redis_url, proc.pid)
    try:
        deadline = time.monotonic() + 120
        while not late.up():
            assert proc.poll() is None and time.monotonic() < deadline, late.logs()
            time.sleep(0.3)
        want = {
            "succeeded": "SUCCESS",
            "pruned": "PRUNED",
            "failed": "FAILURE",
            "running": "STARTED",
        }
        for n, jid in ids.items():
            task = late.task(jid)
            assert task and task["state"] == want[SEARCH_CURVES[n][0]], (n, task)
            assert task["name"] == f"latetune[trial={n}]"
        assert late.task(queued)["state"] == "PENDING"
        # newest received first (Flower's default order): the queued job is on page 1
        assert queued in [r["uuid"] for r in datatable(late, "", length=10)]
        # counts as `fleet status` gives them: a pruned trial is not a success
        rows = datatable(late, "latetune", length=50)
        states = [r["state"] for r in rows]
        assert (states.count("SUCCESS"), states.count("PRUNED")) == (2, 1), states
        # one Worker column: the node name the tasks Flower saw run carry, not the bare host
        from fleet.query.hosts import read_hosts

        node = next(h.nodename for h in read_hosts(client) if h.hostname == "fl-cpu")
        assert {r["worker"] for r in rows if r["worker"]} == {node}, rows
        assert all(r["runtime"] for r in rows if r["state"] == "PRUNED"), rows
        # a pruned trial's page says when it was pruned, not that it succeeded
        authed = late.url.replace("http://", f"http://{USER}:{PASSWORD}@")
        page = chromium(f"{authed}/task/{ids[1]}", tmp_path / "flower-pruned-task.png")
        assert re.search(r"<dt>\s*Pruned\s*</dt>", page), page[-3000:]
        assert not re.search(r"<dt>\s*Succeeded\s*</dt>", page)
    finally:
        stop_flower(proc)


def test_a_gang_is_one_row_on_every_members_host_in_its_true_state_in_a_browser(flower, tmp_path):
    name, gate = "pair[seed=8]", tmp_path / "gate"
    jid = flower.publish({name: f"until:{gate}"}, nodes=2)[name]
    running = flower.wait_task(
        jid, lambda t: t.get("state") == "STARTED" and t.get("gang_hosts"), timeout_s=90
    )
    rec = flower.records().get(jid)
    hosts = rec.gang_hosts.split(",")  # by rank, as `fleet status` lists them
    assert rec.state is JobState.RUNNING and sorted(hosts) == ["fl-cpu", "fl-large"], rec
    assert running["gang_hosts"] == hosts and "running" in running["result"]
    both = " + ".join(hosts)
    [row] = [r for r in datatable(flower, name) if r["uuid"] == jid]  # one row for the gang
    assert (row["state"], row["worker"]) == ("STARTED", both), row
    authed = flower.url.replace("http://", f"http://{USER}:{PASSWORD}@")
    listing = chromium(f"{authed}/tasks", tmp_path / "flower-gang-tasks.png")
    cell = listing.split(f'id="{jid}"', 1)[1].split("</tr>", 1)[0]
    assert f'<span class="fleet-gang-hosts">{both}</span>' in cell and "STARTED" in cell
    page = chromium(f"{authed}/task/{jid}", tmp_path / "flower-gang-task.png")
    assert f'<span class="fleet-gang-hosts">{both}</span>' in page and name in page
    gate.touch()  # seen running: now it may end
    flower.wait_state(jid, JobState.SUCCEEDED)
    done = flower.wait_task(jid, lambda t: t.get("state") == "SUCCESS")
    [row] = [r for r in datatable(flower, name) if r["uuid"] == jid]
    assert (row["state"], row["worker"], done["gang_hosts"]) == ("SUCCESS", both, hosts), row
