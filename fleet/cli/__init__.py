"""The `fleet` command: publish manifests, watch jobs and hosts, cancel and requeue, run a
local fleet.

One module per verb group; each has ``register(subparsers)``. Add a verb group by adding
its module to ``VERB_MODULES``.
"""

from __future__ import annotations

import argparse
import os
import sys

from core.errors import FleetError, ManifestError, UsageError
from fleet.cli import (
    acl,
    artifacts,
    deadletter,
    enroll,
    export,
    hosts,
    jobs,
    local,
    logs,
    publish,
    results,
    settings,
    share,
    store,
    trainers,
    usage,
)
from fleet.cli.common import (  # noqa: F401  (app, where: re-exported)
    EXIT_FAILED,
    EXIT_USAGE,
    app,
    broker_problem,
    say,
    where,
)

VERB_MODULES = (
    publish,
    jobs,
    logs,
    hosts,
    artifacts,
    local,
    enroll,
    deadletter,
    trainers,
    usage,
    share,
    acl,
    settings,
    store,
    results,
    export,
)


def version_line() -> str:
    """``fleet 0.1.0 (Python 3.12.3)``: what an operator compares with a worker's versions."""
    from importlib import metadata

    try:
        version = metadata.version("fleet")
    except metadata.PackageNotFoundError:  # run from a checkout that was never installed
        version = "unknown (not installed)"
    return f"fleet {version} (Python {sys.version.split()[0]})"


def build_parser() -> argparse.ArgumentParser:
    summary = " ".join(__doc__.split("\n\n")[0].split())
    p = argparse.ArgumentParser(prog="fleet", description=summary)
    p.add_argument("--version", action="version", version=version_line())
    sub = p.add_subparsers(
        dest="cmd", required=True, metavar="VERB", title="verbs (`fleet VERB --help` explains each)"
    )
    for module in VERB_MODULES:
        module.register(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    import redis

    args = build_parser().parse_args(argv)
    try:
        return args.fn(args)
    except ManifestError as e:  # every problem, each with its line and fix
        from fleet.cli.publish import print_problems

        print_problems(
            getattr(args, "manifest", "manifest"), e, as_json=getattr(args, "json", False)
        )
        return EXIT_USAGE
    except UsageError as e:  # as argparse answers a bad command line
        say(f"fleet: {e}")
        return EXIT_USAGE
    except FleetError as e:
        say(f"fleet: {e}")
        return EXIT_FAILED
    except BrokenPipeError:  # `fleet logs JOB | head`: the reader has all it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except (redis.ConnectionError, redis.TimeoutError, redis.exceptions.NoPermissionError) as e:
        # a refused password is its own message: "authentication failed", not "cannot reach"
        say(f"fleet: {broker_problem(e)}")
        return EXIT_FAILED


if __name__ == "__main__":
    sys.exit(main())
