"""`fleet local`: a whole local fleet on embedded defaults (and `--stop` for one kept running)."""

from __future__ import annotations

import argparse
import contextlib
import textwrap
from pathlib import Path

from rich.console import Group
from rich.live import Live
from rich.text import Text

from core.secrets import masked
from fleet.cli.common import console, err
from fleet.local import DEFAULT_TIMEOUT_S, SIMULATED_HOSTS, Outcome, Waited

DEFAULT_ROOT = ".fleet-local"
DEFAULT_MANIFEST = "examples/manifest.toml"
PROGRESS_LINES = 8  # running jobs shown under the counts while waiting
HELP_COLUMNS = 79  # `fleet local --help` fits an 80-column terminal
DESCRIPTION = f"""\
Start a whole fleet on this machine and run a manifest on it: a Redis server (its data in
DIR/redis, DIR being --root), a file:// store (DIR/store, unless FLEET_STORE_URL names
another) and three simulated hosts, each a real Celery worker (logs in DIR/logs):
{", ".join(SIMULATED_HOSTS)}.
It publishes the manifest, shows progress while it waits (for a search: until every trial it
issues ended, or its failure budget stopped it), stops waiting early when no live worker can
run what remains, then prints every job's state and the verified artifacts.

Without --keep everything stops when it returns. With --keep the fleet stays up and the
export lines to use it from another shell are printed (then `fleet publish`, `fleet status`,
... talk to it). One fleet per DIR: a second `fleet local` on the same folder refuses.
Exit status 0 when every job succeeded and every artifact verified."""


class ConsoleShow:
    """What `fleet local` prints: the fleet, the plan, live progress, the final tables."""

    def started(self, fleet, lock) -> None:
        if lock.took_over and lock.took_over.processes:
            console.print(
                f"took over {fleet.root} from a fleet that is gone ({lock.took_over.describe()})",
            )
        console.print(
            f"redis {masked(fleet.server.url)} (AOF in {fleet.server.data_dir}), "
            f"store {masked(fleet.store_url)}",
        )
        for note in fleet.notes:
            err.print(f"note: {note}", soft_wrap=True)
        node = f"; nodes NAME@{fleet.node_host}, this folder's" if fleet.node_host else ""
        console.print(
            f"workers: {', '.join(fleet.workers)} (logs in {fleet.root / 'logs'}{node})",
        )

    def published(self, rows, warnings) -> None:
        from fleet import feasibility
        from fleet.cli.publish import print_plan

        print_plan(rows, "published")
        sent = sum(r.action == "publish" for r in rows)
        console.print(f"{sent} published, {len(rows) - sent} skipped")
        for line in feasibility.messages(warnings):
            err.print(f"warning: {line}")

    @contextlib.contextmanager
    def waiting(self):
        if not console.is_terminal:  # a log: one line per change, not a redraw per second
            yield _Lines()
            return
        with Live(console=console, auto_refresh=False, transient=True) as live:
            yield _LiveProgress(live)

    def finished(self, waited: Waited, artifacts) -> None:
        from fleet.cli.artifacts import artifacts_table
        from fleet.cli.jobs import render

        console.print(render(waited.view, title="jobs"))
        for search in waited.searches:
            console.print(search.summary(console.width))
        if waited.outcome in (Outcome.STUCK, Outcome.TIMED_OUT):
            what = "stopped waiting" if waited.outcome is Outcome.STUCK else "timed out"
            err.print(
                f"{what}: " + "; ".join(waited.reasons),
                soft_wrap=True,
            )
        console.print(artifacts_table(artifacts, "the local store"))

    def kept(self, state: dict) -> None:
        from fleet.kept import announce

        announce(state, console)


def progress_lines(view) -> Group:
    """Counts per state, then the running jobs' progress lines."""
    from fleet.cli.jobs import note, when

    parts: list = [Text("waiting for jobs: " + view.summary().split(": ", 1)[-1], style="bold")]
    for r in [r for r in view.rows if not r.state.terminal][:PROGRESS_LINES]:
        parts.append(
            Text(
                f"  {r.name}  {when(r, view.now)}"
                + (f" on {r.worker}" if r.worker else "")
                + (f" | {note(r)}" if note(r) else "")
            )
        )
    return Group(*parts)


class _LiveProgress:
    def __init__(self, live: Live):
        self.live = live

    def update(self, view) -> None:
        self.live.update(progress_lines(view), refresh=True)


class _Lines:
    def __init__(self):
        self.last = ""

    def update(self, view) -> None:
        line = "waiting for jobs: " + view.summary().split(": ", 1)[-1]
        if line != self.last:
            console.print(line)
            self.last = line


def cmd_local(args) -> int:
    if args.stop:
        from fleet.kept import stop

        return stop(Path(args.root).resolve(), console)
    from artifacts.identity import DataResolver
    from fleet.local import run_local
    from fleet.manifests import load

    manifest = load(args.manifest, DataResolver())  # a ManifestError: fleet.cli.main says
    return run_local(
        manifest, ConsoleShow(), keep=args.keep, timeout_s=args.timeout, root=args.root
    )


def register(sub) -> None:
    s = sub.add_parser(
        "local",
        help="run a whole local fleet on embedded defaults",
        # each paragraph wrapped for an 80-column terminal, the break between them kept
        description="\n\n".join(
            textwrap.fill(" ".join(p.split()), HELP_COLUMNS) for p in DESCRIPTION.split("\n\n")
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    s.add_argument(
        "manifest",
        nargs="?",
        default=DEFAULT_MANIFEST,
        help=f"the manifest (TOML) to publish on it (default {DEFAULT_MANIFEST})",
    )
    s.add_argument(
        "--keep",
        action="store_true",
        help="leave Redis and workers running; prints the export lines and the stop command",
    )
    s.add_argument(
        "--stop", action="store_true", help="stop a fleet left running by --keep (in --root)"
    )
    s.add_argument(
        "--root",
        default=DEFAULT_ROOT,
        metavar="DIR",
        help=f"the local fleet's folder: Redis data, store, logs, lock (default {DEFAULT_ROOT})",
    )
    s.add_argument(
        "--timeout",
        type=float,
        default=DEFAULT_TIMEOUT_S,
        metavar="SECONDS",
        help=f"stop waiting for the jobs after this long (default {DEFAULT_TIMEOUT_S:g}); "
        "with --keep the jobs go on",
    )
    s.set_defaults(fn=cmd_local)
