"""`fleet local` for real: one fleet per folder, a stale lock taken over after kill -9, an
early stop when no live worker can run what remains, and a kept fleet refusing a second."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from fleet.rootlock import LOCK_FILE
from tests.waiting import wait_until

pytestmark = pytest.mark.e2e
REPO = Path(__file__).resolve().parents[2]

SLOW = """
[[jobs]]
name = "slow"
command = ["python", "-c", "import time; time.sleep(120)"]
"""
QUICK = """
[[jobs]]
name = "quick"
command = ["true"]
"""
IMPOSSIBLE = """
[[jobs]]
name = "needs-a-big-gpu"
command = ["true"]
require_cuda = true
min_vram_gib = 200
"""

SEARCH = f"""
[[jobs]]
name = "quick-search"
command = ["{sys.executable}", "{REPO / "tests" / "e2e" / "searchjob.py"}", "0.05"]
hyper = {{ epochs = 4 }}
max_attempts = 1
[jobs.search]
trials = 5
parallel = 2
metric = "loss"
seed = 1
max_failures = 2
[jobs.search.space]
x = {{ low = -2.0, high = 2.0 }}
"""


def fleet_local(*args: str, **kw) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLEET_")}
    return subprocess.Popen(
        [sys.executable, "-m", "fleet.cli", "local", *args],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        **kw,
    )


def wait_for_processes(root: Path, n: int, timeout_s: float = 90) -> dict:
    def written():
        try:
            holder = json.loads((root / LOCK_FILE).read_text())
        except (FileNotFoundError, ValueError):  # not yet, or half written
            return None
        return holder if len(holder.get("processes", ())) >= n else None

    return wait_until("the first fleet writes its processes into its lock", written, timeout_s)


def kill_all(holder: dict) -> None:
    for p in holder.get("processes", ()):
        try:
            os.killpg(p["pid"], signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def test_a_second_fleet_on_one_folder_refuses_and_after_kill_9_the_next_takes_over(tmp_path):
    slow, quick = tmp_path / "slow.toml", tmp_path / "quick.toml"
    slow.write_text(SLOW)
    quick.write_text(QUICK)
    root = tmp_path / "root"
    first = fleet_local(str(slow), "--root", str(root), "--timeout", "300")
    holder = {}
    try:
        holder = wait_for_processes(root, 4)
        second = subprocess.run(
            [sys.executable, "-m", "fleet.cli", "local", str(quick), "--root", str(root)],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert second.returncode == 1
        assert "a local fleet is already running from" in second.stderr, second.stderr
        assert f"pid {first.pid}" in second.stderr
        first.send_signal(signal.SIGKILL)
        first.wait(10)
        orphans = [p["pid"] for p in holder["processes"]]
        # kill -9 left Redis and workers behind
        assert any(psutil.pid_exists(pid) for pid in orphans)
        third = subprocess.run(
            [
                sys.executable,
                "-m",
                "fleet.cli",
                "local",
                str(quick),
                "--root",
                str(root),
                "--timeout",
                "120",
            ],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=240,
        )
        assert third.returncode == 0, third.stdout + third.stderr
        assert "took over" in third.stdout and "1 succeeded" in third.stdout
        assert not any(
            psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
            for pid in orphans
        )
    finally:
        if first.poll() is None:
            first.kill()
        kill_all(holder)


def test_fleet_local_stops_waiting_with_the_reason_when_no_live_worker_can_run_the_rest(tmp_path):
    path = tmp_path / "impossible.toml"
    path.write_text(IMPOSSIBLE)
    t0 = time.monotonic()
    run = fleet_local(str(path), "--root", str(tmp_path / "root"), "--timeout", "600")
    out, _ = run.communicate(timeout=240)
    assert run.returncode == 1, out
    assert time.monotonic() - t0 < 120
    assert "stopped waiting: no live worker can run 1 job(s)" in out and "needs-a-big-gpu" in out


def test_a_kept_fleet_refuses_a_second_and_once_killed_with_9_its_folder_is_reused(tmp_path):
    quick = tmp_path / "quick.toml"
    quick.write_text(QUICK)
    root = tmp_path / "root"

    def run(*a):
        return subprocess.run(
            [sys.executable, "-m", "fleet.cli", "local", str(quick), "--root", str(root), *a],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=240,
        )

    kept = run("--keep")
    state = json.loads((root / "fleet.json").read_text())
    try:
        assert kept.returncode == 0, kept.stdout + kept.stderr
        second = run()
        assert second.returncode == 1 and "kept (fleet local --keep)" in second.stderr
        assert (
            "export FLEET_BROKER_URL=" in second.stderr
            and f"local --stop --root {root}" in second.stderr
        )
    finally:
        kill_all(state)
    for p in state["processes"]:
        psutil.wait_procs(
            [psutil.Process(p["pid"])] if psutil.pid_exists(p["pid"]) else [], timeout=10
        )
    again = run()
    assert again.returncode == 0, again.stdout + again.stderr
    assert not (root / "fleet.json").exists()


def test_a_kept_fleet_keeps_its_port_its_folders_names_and_a_clean_stop_is_not_taken_over(tmp_path):
    import socket

    import redis

    from core import constants as C
    from fleet.localaddr import folder_tag

    quick = tmp_path / "quick.toml"
    quick.write_text(QUICK)
    root = tmp_path / "root"

    def run(*a):
        return subprocess.run(
            [sys.executable, "-m", "fleet.cli", "local", str(quick), "--root", str(root), *a],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=240,
        )

    states = []

    def keep() -> dict:
        out = run("--keep")
        states.append(json.loads((root / "fleet.json").read_text()))
        assert out.returncode == 0, out.stdout + out.stderr
        assert "took over" not in out.stdout + out.stderr  # the fleet before stopped cleanly
        return states[-1]

    try:
        first = keep()
        url = first["env"]["FLEET_BROKER_URL"]
        node = f"@{socket.gethostname()}-{folder_tag(root)}"
        workers = [p for p in first["processes"] if p["name"] != "redis"]
        assert all(node in " ".join(psutil.Process(p["pid"]).cmdline()) for p in workers)
        stored = redis.Redis.from_url(url, decode_responses=True).get(C.STORE_KEY)
        assert stored == f"file://{root / 'store'}"  # the fleet knows its store
        assert run("--stop").returncode == 0
        assert keep()["env"]["FLEET_BROKER_URL"] == url  # pasted export lines still work
        assert run("--stop").returncode == 0
        port = int(url.rsplit(":", 1)[1].split("/")[0])
        with socket.socket() as taken:
            taken.bind(("127.0.0.1", port))
            taken.listen()
            out = run()
        assert out.returncode == 0, out.stdout + out.stderr
        assert f"port {port}, recorded for this folder" in out.stderr
        assert "taken by another program" in out.stderr
        assert "took over" not in out.stdout + out.stderr
    finally:
        for state in states:
            kill_all(state)


@pytest.mark.parametrize(
    "failing, status, line",
    [
        (False, 0, "quick-search: search 5/5, best loss="),
        (True, 1, "stopped: 2 trials failed in a row (max_failures=2)"),
    ],
)
def test_fleet_local_waits_for_a_search_until_it_is_done_then_lists_its_artifacts(
    tmp_path, failing, status, line
):
    path = tmp_path / "search.toml"  # failing: each trial exits 3, so the failure budget stops it
    exit3 = f'"{sys.executable}", "-c", "raise SystemExit(3)", '
    path.write_text(SEARCH.replace(f'"{sys.executable}", ', exit3) if failing else SEARCH)
    run = fleet_local(str(path), "--root", str(tmp_path / "root"), "--timeout", "600")
    out, _ = run.communicate(timeout=400)
    assert run.returncode == status, out
    assert line in out.replace("\n", " ")
    if failing:
        assert "5/5" not in out and "0 artifact(s)" in out
    else:
        assert out.count("succeeded") >= 5 and "5 artifact(s) in the local store" in out


def test_fleet_local_waits_for_a_whole_pipeline_a_search_after_a_job_then_a_job_after_it(
    tmp_path,
):
    # prep -> quick-search (2 trials) -> final: a return before final ran would leave it
    # waiting, not succeeded, and fleet local would exit 1
    prep = f'[[jobs]]\nname = "prep"\ncommand = ["{sys.executable}", "-c", "pass"]\n'
    search = SEARCH.replace("trials = 5", "trials = 2").replace(
        'name = "quick-search"\n', 'name = "quick-search"\nafter = ["prep"]\n'
    )
    final = (
        f'[[jobs]]\nname = "final"\ncommand = ["{sys.executable}", "-c", "pass", "final"]\n'
        'after = ["quick-search"]\nparams_from = "quick-search"\n'
    )
    path = tmp_path / "pipeline.toml"
    path.write_text(prep + search + final)
    run = fleet_local(str(path), "--root", str(tmp_path / "root"), "--timeout", "600")
    out, _ = run.communicate(timeout=400)
    assert run.returncode == 0, out
    assert "quick-search: search 2/2, best loss=" in out.replace("\n", " ")
