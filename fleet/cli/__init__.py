"""The `fleet` command: publish manifests, watch jobs and hosts, cancel and requeue, run a
local fleet.

One module per verb group; each has ``register(subparsers)``. Add a verb by adding it to
``fleet.cli.verbs.VERBS``: a command imports the module of the verb it runs and no other, so
`fleet --version`, `fleet --help` and a light verb never pay for Celery or the exporters.
"""

from __future__ import annotations

import argparse
import os
import sys
from importlib import import_module

from fleet.cli.verbs import BY_NAME, VERBS

# what `fleet.cli.X` has long offered; each loads fleet.cli.common (rich) on first use
FROM_COMMON = ("EXIT_FAILED", "EXIT_USAGE", "app", "broker_problem", "say", "where")


def __getattr__(name: str):
    if name in FROM_COMMON:
        from fleet.cli import common

        return getattr(common, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def version_line() -> str:
    """``fleet 0.1.0 (Python 3.12.3)``: what an operator compares with a worker's versions.

    ``fleet.__version__`` rather than the installed metadata: importlib.metadata alone costs
    more than the rest of `fleet --version` (a unit test keeps the two equal)."""
    from fleet import __version__

    return f"fleet {__version__} (Python {sys.version.split()[0]})"


class _Version(argparse.Action):
    """``--version``, its line built only when asked for."""

    def __init__(self, option_strings, dest=argparse.SUPPRESS, **kw):
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kw)

    def __call__(self, parser, namespace, values, option_string=None):
        print(version_line())
        parser.exit()


ALL = "*"  # build_parser(ALL): every verb's real parser


def verb_in(argv: list[str]) -> str | None:
    """The verb a command line runs: its first word that is not an option (fleet's own options
    take no value), if it names one."""
    word = next((a for a in argv if not a.startswith("-")), None)
    return word if word in BY_NAME else None


def build_parser(verb: str | None = ALL) -> argparse.ArgumentParser:
    """The parser: with ``verb`` (a name), that verb's module builds its own sub-parser and every
    other verb is its name and help line only; ``None``, every verb is so (`fleet --help`);
    ``ALL`` (the default: tests, docs), every module builds its verbs."""
    summary = " ".join(__doc__.split("\n\n")[0].split())
    p = argparse.ArgumentParser(prog="fleet", description=summary)
    p.add_argument("--version", action=_Version, help="show program's version number and exit")
    sub = p.add_subparsers(
        dest="cmd", required=True, metavar="VERB", title="verbs (`fleet VERB --help` explains each)"
    )
    wanted = {v.module for v in VERBS} if verb == ALL else {BY_NAME[verb].module} if verb else ()
    built: set[str] = set()
    for v in VERBS:
        if v.module not in wanted:
            sub.add_parser(v.name, help=v.help)
        elif v.module not in built:  # it adds all its verbs, in the table's order
            import_module(f"fleet.cli.{v.module}").register(sub)
            built.add(v.module)
    return p


def _redis_problem(error: Exception) -> bool:
    """Whether ``error`` is Redis unreachable or refusing; only a verb that loaded redis can
    raise one, so a verb that did not is never made to import it."""
    redis = sys.modules.get("redis")
    return redis is not None and isinstance(
        error, (redis.ConnectionError, redis.TimeoutError, redis.exceptions.NoPermissionError)
    )


def main(argv: list[str] | None = None) -> int:
    from core.errors import FleetError, ManifestError, UsageError

    argv = sys.argv[1:] if argv is None else argv
    verb = verb_in(argv)
    if verb is not None:  # a verb may read Redis: redis-py, when it loads, without OpenTelemetry
        from core import redis_import

        redis_import.install()
    args = build_parser(verb).parse_args(argv)
    from fleet.cli.common import EXIT_FAILED, EXIT_USAGE, broker_problem, say

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
    except Exception as e:
        if not _redis_problem(e):
            raise
        # a refused password is its own message: "authentication failed", not "cannot reach"
        say(f"fleet: {broker_problem(e)}")
        return EXIT_FAILED


if __name__ == "__main__":
    sys.exit(main())
