"""How fast preemption makes room: from the decision to the urgent job's start.

One real worker on a simulated 1-GPU 80 GiB host and a real redis-server. Each round
publishes a priority-1 checkpointed command job (tests/e2e/ckptjob.py) that holds the GPU,
waits until it runs with a checkpoint synced, then publishes a priority-9 job that needs
that GPU; the worker preempts the first for the second. Per round, from the records and
the urgent job's own report:

- decision -> claim: the decision (the urgent record's ``preempted[].at``) to its claim
  (``started_at``): stopping the victim (its next tick, SIGTERM), its last checkpoint sync,
  its requeue, the release, the BRPOP wake and the delivery;
- decision -> process: to the urgent job's process start (its workspace made);
- sync -> claim: the victim's last checkpoint sync to the urgent job's claim;
- publish -> claim: what the urgent job waited in all, grace (PREEMPT_GRACE_S) included.

Run from the repo root: `python bench/preempt.py [--rounds 5]`.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import redis  # noqa: E402

from bench.cli import fleet_cli, local_env, publish  # noqa: E402
from bench.timing import parse_args  # noqa: E402
from core.ids import short_id  # noqa: E402
from fleet.local import start_worker, stop_worker  # noqa: E402
from fleet.redis_server import RedisServer  # noqa: E402
from state.jobrecord import JobState  # noqa: E402
from state.records import Records  # noqa: E402

JOB = ROOT / "tests" / "e2e" / "ckptjob.py"
BIG = {
    "cuda_devices": [{"name": "sim-80GB", "vram_total_gib": 80}],
    "ram_total_gib": 64,
    "cpu_cores": 4,
}


def manifest(name: str, priority: int, steps: int, seed: int, extra: str = "") -> str:
    return (
        f'[[jobs]]\nname = "{name}"\ncommand = ["{sys.executable}", "{JOB}", "{steps}", "0.5"]\n'
        f"seed = {seed}\npriority = {priority}\nrequire_cuda = true\nmin_vram_gib = 60\n{extra}\n"
    )


def publish_one(env: dict, root: Path, text: str) -> str:
    (job_id,) = publish(env, root, text).values()
    return job_id


def wait(records: Records, job_id: str, ok, timeout_s: float = 90):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        rec = records.get(job_id)
        if ok(rec):
            return rec
        time.sleep(0.05)
    raise SystemExit(
        f"bench: {short_id(job_id)} did not get there in {timeout_s}s: {records.get(job_id)}"
    )


def one_round(env: dict, root: Path, records: Records, i: int) -> dict:
    low = publish_one(env, root, manifest(f"low{i}", 1, 400, i, 'checkpoint = "ckpt/"'))
    wait(records, low, lambda r: r.state is JobState.RUNNING and r.checkpoint is not None)
    published = time.time()
    urgent = publish_one(env, root, manifest(f"urgent{i}", 9, 1, i))
    wait(records, urgent, lambda r: r.state is not JobState.QUEUED)
    # the GPU is the urgent job's: low cannot resume yet
    synced = records.checkpoint(low)["synced_at"]
    rec = wait(records, urgent, lambda r: r.state is JobState.SUCCEEDED)
    decided = rec.preempted[0]["at"]
    report = json.loads((Path(env["COUNT_DIR"]) / f"urgent{i}.json").read_text())
    fleet_cli(env, "cancel", low, "--yes", timeout_s=60)
    wait(records, low, lambda r: r.state is JobState.CANCELLED)
    return {
        "decision->claim": rec.started_at - decided,
        "decision->process": report["starts"][0]["at"] - decided,
        "sync->claim": rec.started_at - synced,
        "publish->claim": rec.started_at - published,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    args = parse_args(ap, rounds=1)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "counts").mkdir()
        server = RedisServer(root / "redis").start()
        env = local_env(
            server.url, root, FLEET_CHECKPOINT_EVERY_S="0.5", COUNT_DIR=str(root / "counts")
        )
        worker = start_worker("big", BIG, env, root / "logs")
        try:
            records = Records(redis.Redis.from_url(server.url, decode_responses=True))
            try:
                rows = [one_round(env, root, records, i) for i in range(args.rounds)]
            except SystemExit:
                print(
                    (root / "logs" / "big.log").read_text(errors="replace")[-6000:], file=sys.stderr
                )
                raise
        finally:
            stop_worker(worker)
            server.stop()
    print(f"{args.rounds} preemptions on one simulated 80 GiB host (seconds: median, max)")
    for key in rows[0]:
        values = [r[key] for r in rows]
        print(f"  {key:<18} {statistics.median(values):6.2f} {max(values):6.2f}")


if __name__ == "__main__":
    main()
