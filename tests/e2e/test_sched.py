"""End to end on a 80 GiB / 16 GiB / CPU fleet: need queues put idle capable GPUs to work,
`fleet hosts` and `fleet why` read the fleet from worker heartbeats, and publish warns
about jobs no live worker can run."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from fleet.query.refs import resolve
from state.jobrecord import JobState
from state.records import Records
from tests.waiting import wait_until

pytestmark = pytest.mark.e2e


def sleeper(name: str, seconds: float, needs: str, seed: int = 0) -> str:
    return f"""
[[jobs]]
name = "{name}"
command = ["python", "-c", "import time, pathlib; time.sleep({seconds}); pathlib.Path('out/done.txt').write_text('x')"]
artifacts = ["out/*"]
seed = {seed}
{needs}
"""  # noqa: E501


def hog(gate: Path) -> str:
    """cuda-large (only the 80 GiB host): runs until ``gate`` exists (180 s at most), so the
    host stays busy for the module's tests however long a busy machine makes them."""
    return f"""
[[jobs]]
name = "hog"
command = ["python", "-c", "import pathlib, time; g = pathlib.Path({str(gate)!r}); t = time.monotonic(); exec('while not g.exists() and time.monotonic() - t < 180: time.sleep(0.1)'); pathlib.Path('out').mkdir(exist_ok=True); pathlib.Path('out/done.txt').write_text('x')"]
artifacts = ["out/*"]
require_cuda = true
min_vram_gib = 24
"""  # noqa: E501


TEN = sleeper("ten-gib", 1, "require_cuda = true\nmin_vram_gib = 10")  # cuda.vram10
WAITING = [
    sleeper(f"large-{i}", 1, "require_cuda = true\nmin_vram_gib = 24", seed=i) for i in (1, 2)
]


def wait_state(records: Records, name: str, states: set[JobState], timeout_s: float = 90):
    def reached():
        rec = {r.name: r for r in records.all()}.get(name)
        return rec if rec and rec.state in states else None

    return wait_until(
        f"{name} in {sorted(s.value for s in states)}",
        reached,
        timeout_s,
        lambda: str([(r.name, r.state.value) for r in records.all()]),
        every_s=0.3,
    )


@pytest.fixture(scope="module")
def hogged(fleet, tmp_path_factory):
    """The 80 GiB host busy with a long cuda-large job, the 10 GiB job published behind it."""
    d = tmp_path_factory.mktemp("sched")
    gate = d / "gate"
    m = d / "m.toml"
    m.write_text(hog(gate) + TEN)
    fleet.fleet("publish", str(m), check=True)
    records = Records(fleet.client())
    running = wait_state(records, "hog", {JobState.RUNNING})
    assert running.worker == "e2e-large"
    try:
        yield records, d
    finally:
        gate.touch()  # the host is free for whatever the fleet runs next


def test_a_10_gib_job_runs_on_the_16_gib_host_while_the_80_gib_host_is_busy(fleet, hogged):
    records, _ = hogged
    ten = wait_state(records, "ten-gib", {JobState.SUCCEEDED, JobState.FAILED}, timeout_s=60)
    assert (ten.state, ten.queue, ten.worker) == (JobState.SUCCEEDED, "cuda.vram10", "e2e-cuda")
    assert records.get(resolve(records.r, "hog")).state is JobState.RUNNING, (
        "it ran while the big host was busy"
    )


def hosts_json(fleet, until, timeout_s: float = 30) -> dict:
    """`fleet hosts --json` by hostname, once ``until`` holds (workers look for new queues
    every 10 s and heartbeat every 5 s)."""
    deadline = time.monotonic() + timeout_s
    while True:
        hosts = {
            h["hostname"]: h for h in json.loads(fleet.fleet("hosts", "--json", check=True).stdout)
        }
        if until(hosts) or time.monotonic() > deadline:
            return hosts
        time.sleep(1)


def test_fleet_hosts_lists_each_live_worker_with_its_queues_in_order_and_its_current_job(
    fleet, hogged
):
    # the steady order: a worker re-adds the queues after a new one one by one, and a
    # heartbeat may catch it half way
    hosts = hosts_json(
        fleet,
        lambda h: (
            h.get("e2e-large", {}).get("queues", [])[:2] == ["cuda-large", "cuda.vram10"]
            and h["e2e-large"]["queues"][-1] == "cpu"
        ),
    )
    assert set(hosts) == {"e2e-large", "e2e-cuda", "e2e-cpu"}
    large = hosts["e2e-large"]
    assert (
        large["state"] == "up"
        and large["busy"]
        and [r["name"] for r in large["running"]] == ["hog"]
    )
    assert (
        large["capability"]["cuda_devices"][0]["vram_total_gib"] == 80 and large["seen_ago_s"] < 20
    )
    assert large["queues"][:2] == ["cuda-large", "cuda.vram10"] and large["queues"][-1] == "cpu"
    assert hosts["e2e-cpu"]["queues"] == ["cpu"] and not hosts["e2e-cpu"]["busy"]
    table = fleet.fleet("hosts", check=True).stdout
    assert "e2e-large" in table and "hog" in table and "3 live" in table


def test_fleet_why_gives_each_hosts_verdict_the_position_and_what_the_capable_host_is_busy_with(
    fleet, hogged
):
    records, d = hogged
    m = d / "waiting.toml"
    m.write_text("".join(WAITING))
    fleet.fleet("publish", str(m), check=True)
    report = json.loads(fleet.fleet("why", "large-2", "--json", check=True).stdout)
    q = report["queues"][0]
    assert (report["state"], q["queue"], q["floor"]["min_vram_gib"]) == ("queued", "cuda-large", 24)
    verdicts = {h["host"]: (h["could_run"], h["reasons"]) for h in q["hosts"]}
    assert verdicts == {
        "e2e-large": (True, []),
        "e2e-cuda": (False, ["VRAM 16 < 24 GiB (largest device)"]),
        "e2e-cpu": (False, ["no CUDA device", "RAM 8 < 14 GiB"]),
    }
    # one owner: nobody goes first by fair share
    assert q["position"] == {
        "queue": "cuda-large",
        "in_list": True,
        "ahead": 1,
        "waiting_in_queue": 2,
        "fair_share": None,
    }
    assert [b["name"] for b in q["capable"][0]["busy_with"]] == ["hog"]
    text = fleet.fleet("why", "large-2", check=True).stdout
    assert "e2e-cuda: cannot: VRAM 16 < 24 GiB" in text and "1 message(s) ahead" in text


def test_publish_warns_about_a_job_no_live_worker_can_run_and_still_queues_it(fleet, tmp_path):
    m = tmp_path / "huge.toml"
    m.write_text(sleeper("huge", 1, "require_cuda = true\nmin_vram_gib = 100"))
    rows = json.loads(fleet.fleet("publish", str(m), "--dry-run", "--json", check=True).stdout)
    assert rows[0]["infeasible"] == {
        "queue": "cuda.vram100",
        "jobs": 1,
        "nearest_host": "e2e-large",
        "shortfall": ["VRAM 80 < 100 GiB (largest device)"],
    }
    out = fleet.fleet("publish", str(m), check=True)
    assert (
        "warning: no live worker can run 1 job(s) in queue cuda.vram100 (huge); "
        "nearest host e2e-large: VRAM 80 < 100 GiB (largest device)"
    ) in out.stderr.replace("\n", " ")
    records = Records(fleet.client())
    assert records.get(resolve(records.r, "huge")).state is JobState.QUEUED
