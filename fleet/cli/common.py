"""What every `fleet` verb shares: consoles, ``--json`` and its output, exit codes, the app,
Redis, records, cell helpers.

The consoles print text as written: job names like ``gbt[seed=1]`` are not rich markup,
``:rocket:`` is not an emoji code, and nothing is coloured by guesswork. A line that styles
itself builds a ``rich.text.Text``, so that the text it did not write is never read as markup.
"""

from __future__ import annotations

import json
import math
import os
import sys
from collections.abc import Callable
from typing import Any

from rich.console import Console
from rich.text import Text

from state.jobrecord import JobState

PIPE_WIDTH = 160  # into a pipe or a file, unless COLUMNS says otherwise
EXIT_FAILED = 1  # it ran and failed: a FleetError, Redis unreachable or refusing
EXIT_USAGE = 2  # the command line or the manifest is wrong; nothing was done (argparse's code)


def _console(stream) -> Console:
    wide = stream.isatty() or os.environ.get("COLUMNS")
    return Console(
        stderr=stream is sys.stderr,
        width=None if wide else PIPE_WIDTH,
        markup=False,  # names like gbt[seed=1] print as written
        emoji=False,  # and a name or a log line with ":rocket:" in it
        highlight=False,
    )


console = _console(sys.stdout)
err = _console(sys.stderr)

STATE_STYLE = {
    JobState.RUNNING: "bold cyan",
    JobState.FAILED: "bold red",
    JobState.QUEUED: "yellow",
    JobState.CANCELLED: "magenta",
    JobState.SUCCEEDED: "green",
    JobState.PRUNED: "dim green",
    JobState.WAITING: "dim yellow",  # queued once its upstreams succeed
}


def state_cell(state: JobState | str) -> Text:
    """A job's state in a table, in its colour (one colour per state in every view)."""
    try:
        state = JobState(state)
    except ValueError:
        return Text(str(state))
    return Text(state.value, style=STATE_STYLE[state])


def json_option(parser, help: str = "machine-readable output") -> None:
    """Every verb's ``--json``: what it prints for a person, as JSON for a script."""
    parser.add_argument("--json", action="store_true", help=help)


def emit(args, data: Any, human: Callable[[], object]) -> int:
    """With ``--json``, ``data`` (or what it returns, when callable) as indented JSON on
    stdout; else ``human()`` prints for a person. The verb's exit code: 0."""
    if getattr(args, "json", False):
        print(to_json(data() if callable(data) else data, indent=2))
    else:
        human()
    return 0


def to_json(data: Any, indent: int | None = None) -> str:
    """``data`` as standard JSON, the one writer of every verb's ``--json``: a NaN or an
    infinity (a diverged loss, a failed trial's value) becomes ``null``, as standard JSON has
    no such number and jq refuses a document holding one (docs/operating.md); where a verb
    keeps a reason a value is missing (`fleet results`), the reason names the number.
    ``allow_nan=False``: a non-finite number that got past :func:`finite` fails loudly instead
    of writing ``NaN``."""
    try:
        return json.dumps(data, indent=indent, default=str, allow_nan=False)
    except ValueError:  # only then walk the data: a big fleet's --json stays one pass in C
        return json.dumps(finite(data), indent=indent, default=str, allow_nan=False)


def finite(data: Any) -> Any:
    """``data`` with every NaN and infinity in it, at any depth, replaced by None."""
    if isinstance(data, float):
        return data if math.isfinite(data) else None
    if isinstance(data, dict):
        return {k: finite(v) for k, v in data.items()}
    if isinstance(data, (list, tuple)):
        return [finite(v) for v in data]
    return data


def say(text: str, *, to: Console | None = None, **kw) -> None:
    """One message, wrapped by the terminal rather than cut (stderr unless ``to``)."""
    (to or err).print(text, soft_wrap=True, **kw)


def settings():
    """``celeryconfig``, which reads the environment once: a bad value ends the command with one
    line naming the variable, not a traceback. As ``state.app.load_settings`` does, but that
    module imports Celery: here a verb that only reads Redis never loads Celery and kombu
    (about a quarter of a second of CPU)."""
    from importlib import import_module

    from core.errors import ConfigError

    try:
        return import_module("celeryconfig")
    except ConfigError as e:
        raise SystemExit(f"fleet: {e}") from None


_made_app = None  # the client app, once a verb (or a test) asked for it


def app():
    """The Celery client app: for the verbs that send messages, events or control commands."""
    global _made_app
    from state.app import client_app

    _made_app = client_app(settings())
    return _made_app


def broker():
    """The broker this command reads and writes: the client app's, once this process made one
    (its ``broker_url`` is what it sends to, and what tests point elsewhere), else the
    environment's, read without Celery."""
    from state.broker import from_conf, parse

    return from_conf(_made_app.conf) if _made_app is not None else parse(settings().broker_url)


CONNECT_TIMEOUT_S = 5.0  # a host that answers nothing (packets dropped) gets this long
COMMAND_TIMEOUT_S = 30.0


def redis_client():
    """A client for the broker, once one attempt reached it: a refused connection ends the
    command at once instead of after the client's failover retries (meant for a blip, not
    for a Redis that is not there)."""
    from redis.backoff import NoBackoff
    from redis.retry import Retry

    from state.redis_conn import connect

    at = broker()
    probe = connect(
        at,
        socket_connect_timeout=CONNECT_TIMEOUT_S,
        socket_timeout=CONNECT_TIMEOUT_S,
        retry=Retry(NoBackoff(), 0),
    )
    try:
        probe.ping()
    finally:
        probe.close()
    return connect(at, socket_connect_timeout=CONNECT_TIMEOUT_S, socket_timeout=COMMAND_TIMEOUT_S)


def broker_problem(error) -> str:
    """What went wrong with Redis, in one line that names the variable and shows no secret."""
    import redis

    from state.redis_conn import explain

    line = explain(error, broker())
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
        say(picked.note)
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
