"""The table of `fleet`'s verbs: each one's name, the module that builds its parser, and the
line `fleet --help` shows for it.

`fleet --help` is printed from this table alone, and `fleet VERB ...` imports VERB's module
only, so a command pays for what its own verb uses (Celery, the search view, the exporters),
not for every verb's. Pure data: importing it costs nothing. ``tests/unit/test_cli_verbs.py``
fails when this table and what the modules register drift apart.
"""

from __future__ import annotations

from typing import NamedTuple


class Verb(NamedTuple):
    name: str
    module: str  # fleet.cli.<module>: its register(subparsers) adds this verb
    help: str  # as the module's add_parser(name, help=...) says it


# In the order `fleet --help` lists them; a module's verbs together, in the order it adds them.
VERBS = (
    Verb("publish", "publish", "validate a manifest and queue its jobs"),
    Verb("status", "jobs", "every job's state, times and real error; --watch for a live view"),
    Verb("show", "jobs", "one job's record: state, where it ran, progress, error, artifact"),
    Verb("cancel", "jobs", "cancel queued or running jobs"),
    Verb("requeue", "jobs", "run failed, cancelled or succeeded jobs again"),
    Verb("logs", "logs", "a job's output (kept in Redis, bounded); -f follows it live"),
    Verb("capability", "hosts", "this host's capability and the queues it serves"),
    Verb(
        "hosts",
        "hosts",
        "live workers: free/total GPUs, cores and RAM, jobs, queues in serving order",
    ),
    Verb(
        "why",
        "hosts",
        "why a job waits (its queue, each live host's verdict, its position), or where a "
        "search stands",
    ),
    Verb("artifacts", "artifacts", "list artifacts in the store (--verify re-hashes each)"),
    Verb("get", "artifacts", "download a job's bundle, verify its sha256, optionally extract it"),
    Verb("local", "local", "run a whole local fleet on embedded defaults"),
    Verb("enroll", "enroll", "check this host, then write its systemd unit and settings file"),
    Verb("dead-letter", "deadletter", "queue entries workers set aside instead of running"),
    Verb("trainers", "trainers", "the built-in trainers and every hyperparameter they take"),
    Verb("usage", "usage", "jobs, failures, GPU-hours and core-hours per owner"),
    Verb("share", "share", "fair share: owners' weights and standing"),
    Verb("acl", "acl", "the Redis users of the worker, operator and read-only roles"),
    Verb(
        "settings",
        "settings",
        "the FLEET_* settings in effect here and where each came from (secrets masked)",
    ),
    Verb("store", "store", "the fleet's store (recorded in Redis): show or set it"),
    Verb(
        "results",
        "results",
        "a leaderboard of a search, a sweep or jobs sharing a name, best first",
    ),
    Verb("plot", "results", "learning curves, best-so-far and each parameter against the metric"),
    Verb("export", "export", "write a search, a sweep or jobs sharing a name to MLflow or Optuna"),
)

BY_NAME = {v.name: v for v in VERBS}
