"""`fleet publish`: validate a manifest and queue its jobs."""

from __future__ import annotations

import contextlib

from rich.table import Table

from core.errors import ManifestError, UsageError
from core.ids import short_id
from fleet import feasibility
from fleet.cli.common import (
    app,
    broker_problem,
    console,
    emit,
    err,
    json_option,
    plain,
    redis_client,
    to_json,
)
from fleet.plan_summary import SUMMARY_ABOVE_ROWS, summarise


def _progress(args):
    """Bars for hashing and staging large data on a terminal; nothing with --json."""
    from fleet.staging import console_progress

    return console_progress(err) if err.is_terminal and not args.json else contextlib.nullcontext()


def cmd_publish(args) -> int:
    import redis

    from artifacts.identity import DataResolver
    from fleet.manifests import load
    from fleet.owners import resolve
    from fleet.publish import publish
    from fleet.published import PublishedNames

    owner = resolve(args.owner)
    with _progress(args) as progress:  # a ManifestError: fleet.cli.main lists its problems
        manifest = load(
            args.manifest, DataResolver(progress=progress), PublishedNames(redis_client)
        )
    if not args.json:
        print_workdirs(manifest)
    names = {j.name for j in manifest.jobs} | {j.job_id for j in manifest.jobs}
    unknown = [n for n in args.force if n not in names]
    if unknown:
        raise UsageError(f"--force names no job in {args.manifest}: {', '.join(unknown)}")
    offline = False
    try:
        with _progress(args) as progress:
            rows = publish(
                app(),
                redis_client(),
                manifest,
                force=frozenset(args.force),
                dry_run=args.dry_run,
                progress=progress,
                owner=owner,
            )
    except (redis.ConnectionError, redis.TimeoutError) as e:
        if not args.dry_run:
            raise
        from fleet.publish import offline_plan

        # A plan is still useful offline: it shows routing and IDs, not what already ran.
        err.print(
            f"fleet: {broker_problem(e)}; the plan below assumes no job was published before",
        )
        rows = offline_plan(manifest, frozenset(args.force))
        offline = True
    warnings = feasibility.check(None if offline else redis_client(), rows, manifest)
    return emit(
        args,
        lambda: feasibility.annotate([r.to_dict() for r in rows], warnings),
        lambda: print_published(args, manifest, rows, warnings),
    )


def print_published(args, manifest, rows, warnings) -> None:
    title = "plan (dry run: nothing sent)" if args.dry_run else f"published {args.manifest}"
    print_plan(rows, title)
    for search in manifest.searches:  # the space, the budget, how many at once
        console.print("\n".join(search.describe()))
    sent = sum(r.action == "publish" for r in rows)
    console.print(
        f"{sent} to publish, {len(rows) - sent} skipped"
        if args.dry_run
        else f"{sent} published, {len(rows) - sent} skipped"
    )
    for line in feasibility.messages(warnings, dry_run=args.dry_run):
        err.print(f"warning: {line}")


def print_workdirs(manifest) -> None:
    """What each workdir ships: its files, bytes and digest (staged only for jobs sent)."""
    for src in manifest.data_sources.values():
        if src.files:
            size = sum(p.stat().st_size for _, p in src.files)
            console.print(
                f"workdir {src.path}: {len(src.files)} files, {size / 1024:.1f} KiB "
                f"(tar {src.size / 1024:.1f} KiB), sha256 {short_id(src.sha256)}",
            )


def print_problems(path: str, e: ManifestError, *, as_json: bool = False) -> None:
    """Every problem in a manifest (``as_json``: on stdout, for a script)."""
    if as_json:
        problems = [p.as_dict() for p in e.problems]
        print(to_json({"error": "invalid manifest", "problems": problems}, indent=2))
        return
    err.print(f"{path}: {len(e.problems)} problem(s); nothing was published", style="bold red")
    for p in e.problems:
        err.print(f"  {p}")


def print_plan(rows, title: str) -> None:
    """The plan as a table, or as counts per queue and sweep when it is long."""
    if len(rows) > SUMMARY_ABOVE_ROWS:
        print_summary(summarise(rows), title)
    else:
        console.print(_rows_table(rows, title))


def _rows_table(rows, title: str) -> Table:
    table = Table(title=title)
    for col in ("job", "id", "queue", "action", "why"):
        table.add_column(col)
    for r in rows:
        table.add_row(*plain(r.job.name, short_id(r.ref), r.queue, r.action, r.why))
    return table


def _groups_table(title: str, groups, more: int, what: str) -> Table:
    table = Table(title=title)
    for col in (what, "jobs", "publish", "skip"):
        table.add_column(col, justify="left" if col == what else "right")
    for g in groups:
        table.add_row(
            *plain(
                g.name,
                f"{g.jobs:,}",
                f"{g.actions.get('publish', 0):,}",
                f"{g.actions.get('skip', 0):,}",
            )
        )
    if more:
        table.add_row(*plain(f"... {more:,} more", "", "", ""))
    return table


def print_summary(s, title: str) -> None:
    """A long plan as counts per queue and per sweep, then its first rows."""
    console.print(
        f"{title}: {s.total:,} jobs, summarised (--json lists every one)",
    )
    console.print(_groups_table("per queue", s.queues, s.more_queues, "queue"))
    console.print(_groups_table("per sweep", s.sweeps, s.more_sweeps, "sweep"))
    console.print(_rows_table(s.first, f"first {len(s.first)} jobs"))
    if s.more_rows:
        console.print(f"... {s.more_rows:,} more; --json for all")


def register(sub) -> None:
    s = sub.add_parser("publish", help="validate a manifest and queue its jobs")
    s.add_argument(
        "manifest",
        help="the manifest (TOML); every problem in it is listed before anything is sent",
    )
    s.add_argument("--dry-run", action="store_true", help="print the plan; send nothing")
    json_option(s)
    s.add_argument(
        "--force",
        action="append",
        default=[],
        metavar="NAME",
        help="run this job again (name or ID), even if it succeeded; repeatable",
    )
    s.add_argument(
        "--owner",
        metavar="NAME",
        default=None,
        help="who the jobs belong to (default: $FLEET_OWNER, else user@host); a re-published job "
        "keeps its first owner unless --force runs it again",
    )
    s.set_defaults(fn=cmd_publish)
