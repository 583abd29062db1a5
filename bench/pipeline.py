"""A pipeline's release latency and its publish cost, on a real Redis with fleet's own scripts.

Starts its own redis-server (temp dir, AOF on as in production) and publishes with
`fleet.publish.publish`, then plays the worker's side with `state.records.Records` (claim,
finish) as `tasks/` does:
  - fan-out: one upstream and --fanout followers after it; its end (finish.lua, which
    releases the first slice of followers in the same script and leaves the rest to
    release_rest.lua, a slice per call, as the worker calls it right after) is timed from
    the call to the moment each follower is queued: a slice is one atomic step, so each
    follower's sample is the time its slice returned. --runs runs; the whole release (its
    last follower queued) is printed beside;
  - chain: --chain jobs, each after the one before; each link is timed from the end of a job
    to its follower queued (one sample per link);
  - baselines, in the same run: the same finish of a job that has no follower; and, for the
    fan-out, the floor of any release: one Lua script that only reads each follower's stored
    message and pushes it (``FLOOR_LUA``), so a loaded machine's figure reads against it.
  - publish: a --fanin fan-in (a sweep of that many jobs, one job after all of them) against
    the same manifest without the edge, best of --runs each, Redis flushed between.
Each release is checked, not assumed: every follower's record is ``queued`` with its message
pushed, once; the goal is release p50 <= 50 ms (``RELEASE_P50_GOAL_S``).

Run from the repo root:
`python bench/pipeline.py [--fanout 1000] [--chain 100] [--fanin 10000] [--runs 5]`.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.timing import best_of, parse_args  # noqa: E402
from fleet.redis_server import RedisServer  # noqa: E402
from state.jobrecord import JobState, fetch_many  # noqa: E402

RELEASE_P50_GOAL_S = 0.050
QUEUE = "cpu"
# what pushing the followers' stored messages costs in one script, with nothing else done
FLOOR_LUA = """
for _, k in ipairs(KEYS) do redis.call('LPUSH', ARGV[1], redis.call('HGET', k, 'msg')) end
redis.call('DEL', ARGV[1])
"""


def job(name: str, *, after: str = "", sweep: int = 0, seed: int = 0) -> str:
    text = f'[[jobs]]\nname = "{name}"\ncommand = ["true"]\nseed = {seed}\n'
    if after:
        text += f'after = ["{after}"]\n'
    if sweep:
        text += f"[jobs.sweep]\nseed = [{', '.join(map(str, range(sweep)))}]\n"
    return text + "\n"


def pct(samples: list[float], p: float) -> float:
    """The ``p``-th percentile, nearest rank (p99 of 100 samples is the 99th, not a blend)."""
    ordered = sorted(samples)
    return ordered[max(0, min(len(ordered) - 1, round(p / 100 * len(ordered)) - 1))]


def ms(s: float) -> str:
    return f"{s * 1000:,.1f} ms"


class Bench:
    def __init__(self, client):
        from fleet.manifests import loads
        from fleet.publish import publish
        from state.records import Records
        from tasks import app

        self.client, self.loads, self.publish, self.app = client, loads, publish, app
        self.records = Records(client)
        self.tokens = 0

    def published(self, text: str) -> dict[str, str]:
        manifest = self.loads(text, "bench.toml")
        self.publish(self.app, self.client, manifest)
        return {j.name: j.job_id for j in manifest.jobs}

    def end(self, job_id: str) -> float:
        """Run ``job_id`` (claim) and end it succeeded; the seconds its end took (the release of
        its followers, one slice at most, happens in that same script)."""
        return self.end_sliced(job_id, 0)[0]

    def end_sliced(self, job_id: str, followers: int) -> list[float]:
        """End ``job_id`` as ``end`` does, then finish its release a slice at a time, as
        ``Records.finish`` does: the seconds until each of its ``followers`` was queued."""
        self.tokens += 1
        token = f"t{self.tokens}"
        assert self.records.claim(job_id, "bench", token, {}, QUEUE).run, f"{job_id} not claimed"
        start = time.perf_counter()
        assert self.records.finish(job_id, token, JobState.SUCCEEDED, release_rest=False)
        first = time.perf_counter() - start
        slices = []
        while True:
            n, _, upstream = self.records.release_slice()
            if not upstream:
                break
            slices += [time.perf_counter() - start] * n
        return [first] * (followers - len(slices) if followers else 1) + slices

    def check_queued(self, ids: list[str]) -> None:
        """Every one of ``ids`` released once: queued, with one message pushed."""
        recs = fetch_many(self.client, ids, ("state", "pushes"))
        bad = [r.job_id for r in recs if r.state is not JobState.QUEUED or r.pushes != 1]
        assert len(recs) == len(ids) and not bad, f"{len(bad)} followers not released once"


def fan_out(b: Bench, n: int, runs: int) -> tuple[list[float], list[float], list[float]]:
    """Release samples (one per follower per run) and the baselines: a lone job's end, and
    the floor (the followers' messages pushed by a bare script)."""
    from state.jobrecord import job_key

    samples, base, floor, whole = [], [], [], []
    for _ in range(runs):
        b.client.flushall()
        ids = b.published(job("up") + job("lone", seed=1) + job("f", after="up", sweep=n))
        followers = [jid for name, jid in ids.items() if name.startswith("f[")]
        assert len(followers) == n
        start = time.perf_counter()
        b.client.eval(FLOOR_LUA, n, *map(job_key, followers), "bench:floor")
        floor.append(time.perf_counter() - start)
        took = b.end_sliced(ids["up"], n)
        b.check_queued(followers)
        samples += took
        whole.append(max(took))
        base.append(b.end(ids["lone"]))
    print(
        f"fan-out of {n:,}: the whole release (its last follower queued) p50 "
        f"{ms(pct(whole, 50))}, max {ms(max(whole))}"
    )
    return samples, base, floor


def chain(b: Bench, n: int) -> tuple[list[float], list[float]]:
    """One sample per link of an ``n``-job chain, and a lone job's end after each link."""
    b.client.flushall()
    text = job("c0") + "".join(job(f"c{i}", after=f"c{i - 1}", seed=i) for i in range(1, n))
    text += "".join(job(f"lone{i}", seed=10_000 + i) for i in range(n - 1))
    ids = b.published(text)
    samples, base = [], []
    for i in range(n - 1):
        samples.append(b.end(ids[f"c{i}"]))
        b.check_queued([ids[f"c{i + 1}"]])
        base.append(b.end(ids[f"lone{i}"]))
    return samples, base


def fan_in_publish(b: Bench, n: int, runs: int) -> tuple[float, float]:
    """Seconds to load and publish an ``n``-job fan-in, and the same jobs without the edge."""
    piped = job("up", sweep=n) + job("down", after="up", seed=n)
    plain = job("up", sweep=n) + job("down", seed=n)

    def timed(text: str) -> float:
        s, _ = best_of(runs, lambda: b.published(text), setup=b.client.flushall)
        return s

    plain_s, piped_s = timed(plain), timed(piped)
    # the follower waits on every one of the n upstreams (its waits set), none released yet
    down = fetch_many(b.client, [b.published(piped)["down"]], ("state",))[0]
    assert down.state is JobState.WAITING, down.state
    return piped_s, plain_s


def report(what: str, samples: list[float], base: list[float], floor: list[float] = ()) -> float:
    p50, p99 = pct(samples, 50), pct(samples, 99)
    b50 = pct(base, 50)
    print(
        f"{what}: release p50 {ms(p50)}, p99 {ms(p99)} ({len(samples):,} followers); a lone "
        f"job's end p50 {ms(b50)}: release = {p50 / b50:.1f}x a plain end"
    )
    if floor:
        f50 = pct(floor, 50)
        print(
            f"  the floor (their messages pushed by a bare script) p50 {ms(f50)}: "
            f"release = {p50 / f50:.1f}x the floor"
        )
    return p50


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--fanout", type=int, default=1000, help="followers of one upstream")
    parser.add_argument("--chain", type=int, default=100, help="jobs in the chain")
    parser.add_argument("--fanin", type=int, default=10_000, help="upstreams of one follower")
    parser.add_argument("--runs", type=int, default=5)
    args = parse_args(parser, fanout=20, chain=5, fanin=50, runs=1)

    with (
        tempfile.TemporaryDirectory(prefix="fleet-bench-pipeline-") as tmp,
        RedisServer(Path(tmp, "redis")) as server,
    ):
        os.environ["FLEET_BROKER_URL"] = server.url  # read when `tasks` is first imported
        os.environ.pop("FLEET_RESULT_BACKEND", None)
        import redis

        b = Bench(redis.Redis.from_url(server.url, decode_responses=True))
        print(f"redis {server.url}; {args.runs} run(s)")
        p50 = report(f"fan-out of {args.fanout:,}", *fan_out(b, args.fanout, args.runs))
        p50 = max(p50, report(f"chain of {args.chain}", *chain(b, args.chain)))
        piped_s, plain_s = fan_in_publish(b, args.fanin, args.runs)
        print(
            f"publish a {args.fanin:,}-job fan-in: {ms(piped_s)}; the same jobs without the "
            f"edge: {ms(plain_s)}: {piped_s / plain_s:.2f}x"
        )
        met = p50 <= RELEASE_P50_GOAL_S
        print(f"goal release p50 <= {ms(RELEASE_P50_GOAL_S)}: {'met' if met else 'NOT met'}")
        return 0 if met or args.smoke else 1


if __name__ == "__main__":
    sys.exit(main())
