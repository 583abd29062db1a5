"""What every `fleet` verb shares: consoles, the app, Redis, records, cell helpers."""
from __future__ import annotations

import sys

from rich.console import Console
from rich.text import Text

console = Console(width=None if sys.stdout.isatty() else 160)
err = Console(stderr=True, width=None if sys.stderr.isatty() else 160)


def app():
    from state.app import client_app  # imports celeryconfig: env errors surface here, named
    return client_app()


def redis_client():
    from state.redis_conn import client_for
    return client_for(app(), socket_connect_timeout=5, socket_timeout=30)


def broker_problem(error) -> str:
    """What went wrong with Redis, in one line that names the variable and shows no secret."""
    from state.broker import from_conf
    from state.redis_conn import explain
    return explain(error, from_conf(app().conf))


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
