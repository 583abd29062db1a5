"""Real celery workers for tests: the simulated hosts they stand for, and the wait until they
answer."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from tests.waiting import wait_until

CUDA_LARGE = {
    "cuda_devices": [{"name": "sim-A100-80GB", "vram_total_gib": 80}],
    "ram_total_gib": 64,
}
CUDA = {"cuda_devices": [{"name": "sim-4080-16GB", "vram_total_gib": 16}], "ram_total_gib": 32}
CPU = {"cuda_devices": [], "ram_total_gib": 8}

# A ping collects every reply until its timeout, so each poll costs this long: a short one
# returns soon after the worker is up (a worker starts in seconds; a late reply is ignored
# and the next poll catches it).
PING_S = 0.25


def client_app(url: str):
    """A plain Celery client on ``url`` (the fleet app's pools are bound at first use)."""
    from celery import Celery

    return Celery("e2e-client", broker=url, backend=url)


def answering(app) -> set[str]:
    """The names (before the ``@``) of the workers that answer a ping now."""
    return {list(r)[0].split("@")[0] for r in app.control.ping(timeout=PING_S) or []}


def answering_at(url: str):
    """``answering`` on a client of ``url``, as a function of nothing. A ping whose connection
    the server closed is no answer yet, and the next one goes on a new client: twice in
    whole-suite runs beside two busy loops, the first ping after a worker started read
    "Connection closed by server" from the test's own, running Redis (its log says nothing;
    the cause is not found, and no fleet code pings)."""
    import redis
    from kombu.exceptions import OperationalError

    app = client_app(url)

    def now() -> set[str]:
        nonlocal app
        try:
            return answering(app)
        except (redis.ConnectionError, OperationalError, ConnectionError) as e:
            print(f"ping: {type(e).__name__}: {e}; pinging again on a new client")
            app = client_app(url)
            return set()

    return now


def local_env(broker_url: str, root: Path, **extra: str) -> dict:
    """This process's environment for a local fleet on ``broker_url`` with its store under
    ``root``, plus ``extra``; a host's capability is detected (or simulated), never inherited."""
    import os

    env = dict(os.environ, FLEET_BROKER_URL=broker_url, FLEET_STORE_URL=f"file://{root / 'store'}")
    env.update(extra)
    env.pop("FLEET_CAPABILITY", None)
    return env


def wait_for_workers(env: dict, names: Iterable[str], timeout_s: float = 60) -> None:
    """Return once every worker in ``names`` answers a ping on ``env``'s broker."""
    now, want = answering_at(env["FLEET_BROKER_URL"]), set(names)
    wait_until(f"workers {sorted(want)} answer a ping", lambda: want <= now(), timeout_s)


def tail_logs(log_dir: Path, chars: int = 3000) -> str:
    """The last ``chars`` of every ``*.log`` in ``log_dir``, each under its file's name: what a
    failed wait shows."""
    return "\n".join(
        f"--- {p.name}\n{p.read_text(errors='replace')[-chars:]}"
        for p in sorted(log_dir.glob("*.log"))
    )
