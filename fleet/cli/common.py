"""What every `fleet` verb shares: consoles, the app, Redis, records, cell helpers."""

from __future__ import annotations

import os
import sys

from rich.console import Console
from rich.text import Text

PIPE_WIDTH = 160  # into a pipe or a file, unless COLUMNS says otherwise
console = Console(width=None if sys.stdout.isatty() or os.environ.get("COLUMNS") else PIPE_WIDTH)
err = Console(
    stderr=True, width=None if sys.stderr.isatty() or os.environ.get("COLUMNS") else PIPE_WIDTH
)


def app():
    from state.app import client_app, load_settings

    return client_app(load_settings("celeryconfig"))  # env errors surface here, named


CONNECT_TIMEOUT_S = 5.0  # a host that answers nothing (packets dropped) gets this long
COMMAND_TIMEOUT_S = 30.0


def redis_client():
    """A client for the broker, once one attempt reached it: a refused connection ends the
    command at once instead of after the client's failover retries (meant for a blip, not
    for a Redis that is not there)."""
    from redis.backoff import NoBackoff
    from redis.retry import Retry

    from state.redis_conn import client_for

    probe = client_for(
        app(),
        socket_connect_timeout=CONNECT_TIMEOUT_S,
        socket_timeout=CONNECT_TIMEOUT_S,
        retry=Retry(NoBackoff(), 0),
    )
    try:
        probe.ping()
    finally:
        probe.close()
    return client_for(
        app(), socket_connect_timeout=CONNECT_TIMEOUT_S, socket_timeout=COMMAND_TIMEOUT_S
    )


def broker_problem(error) -> str:
    """What went wrong with Redis, in one line that names the variable and shows no secret."""
    import redis

    from state.broker import from_conf
    from state.redis_conn import explain

    line = explain(error, from_conf(app().conf))
    if isinstance(error, redis.TimeoutError) or "timed out" in str(error).lower():
        line += (
            f" (no answer within {CONNECT_TIMEOUT_S:g} s: the host is up but silent, "
            "or a firewall drops the packets; a Redis that is not running refuses at once)"
        )
    return line


def job_id_for(rec, ref: str, verb: str) -> str:
    """The one job ``ref`` names (``fleet.query.refs``, the resolver every verb uses); when
    other jobs share its name, stderr says which one ``verb`` picked and how to reach them."""
    from fleet.query import refs

    picked = refs.pick(rec.r, ref, verb)
    if picked.note:
        err.print(picked.note, markup=False, highlight=False, soft_wrap=True)
    return picked.job_id


def records():
    from state.records import Records

    return Records(redis_client())


def plain(*values: str) -> list[Text]:
    """Table cells shown as written: a sweep name like gbt[seed=1] is not rich markup."""
    return [Text(str(v)) for v in values]


def where(url: str) -> str:
    """A broker URL without its credentials, for messages."""
    from state.broker import masked

    return masked(url)
