"""Job verbs: `fleet status [--watch]`, `show`, `cancel`, `requeue`."""

from __future__ import annotations

import sys
import time
from dataclasses import replace

from rich.console import Group
from rich.text import Text

from core import constants as C
from core.errors import UsageError
from core.ids import short_id
from fleet.cli.common import (
    EXIT_FAILED,
    app,
    console,
    emit,
    err,
    job_id_for,
    json_option,
    records,
    redis_client,
    state_cell,
    to_json,
)
from fleet.cli.tables import Layout
from fleet.query import jobs as Q
from fleet.query import refs
from fleet.query.pipeline import Edge, wait_note
from state.jobrecord import JobRecord, JobState, ran_on

SHOW_ACTED = 20  # cancel/requeue list this many jobs by name, then count the rest


# --- status -------------------------------------------------------------------------
def when(row: JobRecord, now: float, compact: bool = False) -> str:
    """How long it waited or ran, and when it ended. ``compact`` (a narrow terminal) keeps the
    number the state column does not already say: a cut "ran 4s, 4m1…" told nothing."""
    t = Q.times(row, now)
    if row.state in Q.WAITING_STATES:
        waited = Q.human_duration(t["queued_for_s"])
        return waited if compact else f"waiting {waited}"
    if row.state is JobState.RUNNING:
        ran = Q.human_duration(t["ran_for_s"])
        return ran if compact else f"running {ran}"
    ended = f"{Q.human_duration(t['finished_ago_s'])} ago"
    if compact or t["ran_for_s"] is None:
        return ended
    return f"ran {Q.human_duration(t['ran_for_s'])}, {ended}"


def note(row: JobRecord, edges: tuple[Edge, ...] = ()) -> str:
    """The row's progress, result or error in one line; a waiting follower's, what it waits on
    (``edges``: its upstreams as they stand, fleet.query.pipeline)."""
    if row.state is JobState.WAITING:
        return wait_note(edges)
    if row.state is JobState.RUNNING and row.progress:
        metrics = Q.headline_metrics(row.progress.get("metrics"))
        if metrics:
            return " ".join(f"{k}={_short(v)}" for k, v in metrics.items())
        tail = [ln for ln in row.progress.get("tail") or [] if ln.strip()]
        return tail[-1] if tail else ""
    if row.state in (JobState.SUCCEEDED, JobState.PRUNED) and isinstance(row.result, dict):
        return " ".join(
            f"{k}={_short(v)}" for k, v in Q.headline_metrics(row.result.get("metrics")).items()
        )
    if row.problems:  # a record some of whose fields did not decode: say so, never hide the row
        return (
            f"record unreadable: {', '.join(row.problems)}; see `fleet show {short_id(row.job_id)}`"
        )
    return row.reason


def _short(v) -> str:
    return f"{v:.4g}" if isinstance(v, float) else str(v)


ID_MIN_CHARS = 6
STATUS = Layout(
    columns=(
        "job",
        "id",
        "state",
        "owner",
        "queue",
        "tries",
        "worker",
        "time",
        "progress / error",
        "artifact",
    ),
    always=("job", "id", "state", "worker"),
    optional=("time", "progress / error", "queue", "tries", "artifact", "owner"),
    shrinks={"progress / error": 12, "time": 8},
    right=("tries",),
)


def unique_prefix_len(ids: list[str], least: int = ID_MIN_CHARS) -> int:
    """The shortest prefix length (at least ``least``) that tells every ID apart."""
    n = least
    while n < max((len(i) for i in ids), default=0) and len({i[:n] for i in ids}) < len(set(ids)):
        n += 1
    return n


def worker_cell(r: JobRecord) -> str:
    """The worker, and the GPUs a running job holds there: ``big4 (GPU 0-1)``."""
    held = Q.gpu_list([g.index for g in Q.parse_gpus(r.gpu)]) if r.state is JobState.RUNNING else ""
    where = ran_on(r.worker, r.gang_hosts)  # a gang: each member's host
    return f"{where} (GPU {held})" if held else where


def _cells(r: JobRecord, now: float, id_len: int, text: str, compact: bool = False) -> dict:
    return {
        "job": Text(r.name),
        "id": r.job_id[:id_len],
        "state": state_cell(r.state),
        "queue": Text(r.queue),
        "tries": str(r.runs),
        "worker": Text(worker_cell(r)),
        "time": when(r, now, compact),
        "progress / error": Text(text),
        "artifact": short_id((r.artifact or {}).get("sha256", "")),
        "owner": Text(r.owner),
    }


def render(
    v: Q.JobsView, title: str = "", *, width: int | None = None, wide: bool = False
) -> Group:
    """The status table for a terminal ``width`` columns wide: names, IDs, states and hosts stay
    whole; lower-value columns go first; errors get their own line under the table."""
    id_len = unique_prefix_len([r.job_id for r in v.rows])
    notes = {r.job_id: note(r, v.edges.get(r.job_id, ())) for r in v.rows}
    errors = (
        []
        if wide
        else [
            r
            for r in v.rows
            if r.state in (JobState.FAILED, JobState.CANCELLED) and notes[r.job_id]
        ]
    )
    rows = [
        _cells(r, v.now, id_len, "see below" if r in errors else notes[r.job_id]) for r in v.rows
    ]
    table, widths = STATUS.table(rows, width or console.width, wide)
    # a time column that would be cut shows each time's short form instead
    compact = not wide and widths.get("time", 0) < STATUS.natural(rows)["time"]
    if compact:
        rows = [
            _cells(r, v.now, id_len, "see below" if r in errors else notes[r.job_id], True)
            for r in v.rows
        ]
        table, widths = STATUS.table(rows, width or console.width, wide)
    if "progress / error" not in widths:  # too narrow for notes: each goes on its own line
        errors = [r for r in v.rows if notes[r.job_id]]
    elif not wide:  # a note the column would cut ("train_loss=0.…") goes whole on its own line
        room = widths["progress / error"]
        cut = [r for r in v.rows if r not in errors and len(notes[r.job_id]) > room]
        if cut:
            errors += cut
            # else the column says nothing
            kept = any(notes[r.job_id] and r not in errors for r in v.rows)
            rows = [
                _cells(r, v.now, id_len, "see below" if r in errors else notes[r.job_id], compact)
                for r in v.rows
            ]
            table, widths = STATUS.table(
                rows, width or console.width, wide, drop=() if kept else ("progress / error",)
            )
    parts: list = ([Text(title, style="italic")] if title else []) + [
        Text(v.summary(), style="bold")
    ]
    if v.rows:
        parts.append(table)
    for r in errors:
        style = "red" if r.state in (JobState.FAILED, JobState.CANCELLED) else ""
        parts.append(Text(f"{r.name}: {notes[r.job_id]}", style=style))
    if v.hidden:
        parts.append(
            Text(
                f"{len(v.rows):,} of {v.matched:,} shown, most interesting first (running, failed, "
                "queued, waiting, cancelled, succeeded); narrow with "
                "--state/--name/--host/--owner or raise --limit",
                style="dim",
            )
        )
    return Group(*parts)


def _filter(args, folded: frozenset[str] = frozenset()) -> Q.JobFilter:
    return Q.JobFilter(Q.parse_states(args.state), args.name, args.host, args.owner, folded)


def cmd_status(args) -> int:
    from fleet.query.searches import summaries

    if args.tree:
        from fleet.cli.tree import cmd_tree

        if args.watch:
            raise UsageError("--tree draws the pipelines once; leave out --watch (or --tree)")
        return cmd_tree(args, _filter(args))
    client = redis_client()
    searches = summaries(client)
    flt = _filter(args, frozenset() if args.all else frozenset(s.search_id for s in searches))
    if args.watch:
        return _watch(client, flt, args)
    limit = args.limit if args.limit is not None else (None if args.json else C.STATUS_MAX_ROWS)
    v = Q.status(client, flt, limit or None)

    def human() -> None:
        console.print(render(v, wide=args.wide))
        for line in _search_lines(client, searches):
            console.print(line)

    return emit(args, lambda: {**v.to_dict(), "searches": [s.to_dict() for s in searches]}, human)


def _search_lines(client, searches=None) -> list[Text]:
    """One line per search (its trials are folded into it; --all lists them as rows)."""
    from fleet.query.pipeline import search_edges
    from fleet.query.searches import summaries

    searches = summaries(client) if searches is None else searches
    # a search that follows upstreams says what it still waits on before it issues a trial
    waits = {
        sid: wait_note(edges)
        for sid, edges in search_edges(client, [s.search_id for s in searches]).items()
        if any(e.awaited for e in edges)
    }
    return [
        Text(
            s.summary(console.width) + (f"; {waits[s.search_id]}" if s.search_id in waits else ""),
            style="red" if s.stopped else "",
        )
        for s in searches
    ]


def _watch(client, flt: Q.JobFilter, args) -> int:
    from rich.live import Live

    every = args.every
    try:
        if args.json:  # one JSON object per refresh, for scripts
            while True:
                print(
                    to_json(Q.status(client, flt, args.limit or C.STATUS_MAX_ROWS).to_dict()),
                    flush=True,
                )
                time.sleep(every)
        if not console.is_terminal:  # a pipe or a file: whole frames, one after another
            for frame in _frames(client, flt, args):
                console.print(frame)
                console.print()
                console.file.flush()
        with Live(console=console, auto_refresh=False, transient=False) as live:
            for frame in _frames(client, flt, args):
                live.update(frame, refresh=True)
    except KeyboardInterrupt:
        return 0


def _frames(client, flt: Q.JobFilter, args):
    from fleet.query.searches import summaries

    every = args.every
    while True:
        t0 = time.monotonic()
        rows = args.limit or (
            max(5, console.size.height - 10) if console.is_terminal else C.STATUS_MAX_ROWS
        )
        # a search published since the last frame folds too
        searches = [] if args.all else summaries(client)
        flt = replace(flt, folded=frozenset(s.search_id for s in searches))
        v = Q.status(client, flt, rows)
        took = time.monotonic() - t0
        # reading a huge fleet must not become the whole load on Redis: back off
        pause = max(every, 4 * took)
        stamp = time.strftime("%H:%M:%S")
        yield Group(
            render(
                v, f"fleet status · {stamp} · every {pause:.3g}s · Ctrl+C to stop", wide=args.wide
            ),
            *_search_lines(client, searches),
        )
        time.sleep(pause)


# --- show ---------------------------------------------------------------------------
def cmd_show(args) -> int:
    from fleet.cli.show import render_show

    rec = records()
    view = Q.record_view(rec.get(job_id_for(rec, args.job, "show")).to_dict())
    return emit(args, view, lambda: console.print(render_show(view)))


# --- cancel / requeue ---------------------------------------------------------------
def _confirm(verb: str, m: refs.Matches, args) -> bool:
    n = len(m.hits)
    if n <= C.CONFIRM_ABOVE_JOBS or args.yes or args.dry_run:
        return True
    what = ", ".join(repr(r.ref) for r in m.resolutions if r.hits)
    if sys.stdin.isatty() and not args.json:
        answer = console.input(f"{verb} {n:,} jobs matched by {what}? [y/N] ")
        return answer.strip().lower() in ("y", "yes")
    raise UsageError(
        f"{what} matches {n:,} jobs (more than {C.CONFIRM_ABOVE_JOBS}); add --yes to {verb} them "
        f"all, or --dry-run to list them first"
    )


def _act(verb: str, args, act, announce=None, *, before=None) -> int:
    """Match references to jobs, act on each, tell Flower (``before`` acting, or ``announce``
    after), and report what was done and skipped."""
    rec = records()
    m = refs.match(rec.r, args.jobs)
    for r in m.unmatched:
        err.print(f"{r.ref}: {r.note}")
    if m.hits and not _confirm(verb, m, args):
        err.print("nothing done")
        return EXIT_FAILED
    if before is not None and m.hits and not args.dry_run:
        before(rec, [h.job_id for h in m.hits])
    done, skipped = [], []
    for hit in m.hits:
        ok, state, why = act(rec, hit.job_id, args.dry_run)
        (done if ok else skipped).append(
            {"job_id": hit.job_id, "name": hit.name, "was": state, **({} if ok else {"why": why})}
        )
    if announce is not None and done and not args.dry_run:
        announce(rec, done)
    report = {
        "verb": verb,
        "dry_run": args.dry_run,
        "matched": [{"ref": r.ref, "how": r.how, "jobs": len(r.hits)} for r in m.resolutions],
        "done": done,
        "skipped": skipped,
        "unmatched": [{"ref": r.ref, "why": r.note} for r in m.unmatched],
    }
    emit(args, report, lambda: _print_report(verb, report))
    return 0 if done and not m.unmatched else EXIT_FAILED


def _print_report(verb: str, report: dict) -> None:
    past = {"cancel": "cancelled", "requeue": "requeued"}[verb]
    for r in report["matched"]:
        if r["how"] in ("sweep", "glob", "prefix") and r["jobs"]:
            console.print(f"{r['ref']!r} matched {r['jobs']:,} job(s) by {r['how']}")
    head = f"would {verb}" if report["dry_run"] else past
    for label, rows in ((head, report["done"]), ("skipped", report["skipped"])):
        if not rows:
            continue
        console.print(f"{label} {len(rows):,}:")
        for row in rows[:SHOW_ACTED]:
            console.print(
                f"  {row['name']} ({short_id(row['job_id'])}) "
                + (f"was {row['was']}" if "why" not in row else row["why"]),
            )
        if len(rows) > SHOW_ACTED:
            by: dict[str, int] = {}
            for row in rows[SHOW_ACTED:]:
                by[row.get("why") or f"was {row['was']}"] = (
                    by.get(row.get("why") or f"was {row['was']}", 0) + 1
                )
            console.print("  and " + ", ".join(f"{n:,} more {k}" for k, n in by.items()))


def _announce_cancelled(rec, done: list[dict]) -> None:
    """Flower shows each cancelled job REVOKED (a running job's worker says so when it stops it)."""
    from state import events  # Celery: only the verbs that tell Flower load it

    events.announce_cancelled(app(), [d["job_id"] for d in done if d["was"] == "queued"])


def _announce_reruns(rec, job_ids: list[str]) -> None:
    """Flower shows each requeued job's new run, not its old result: said before any message
    is pushed, so that no worker's event of the new run can reach Flower first."""
    from state import events

    events.announce_reruns(app(), rec.r, job_ids)


def _cancel_one(rec, jid: str, dry_run: bool) -> tuple[bool, str, str]:
    state = rec.states([jid])[jid]
    if dry_run or state is None or state.terminal:
        ok = state is not None and not state.terminal
        return (
            ok,
            state.value if state else "missing",
            "" if ok else f"already {state.value if state else 'gone'}",
        )
    from state.search import trials

    res, not_advanced = trials.cancel(rec, jid)
    if not_advanced:
        err.print(not_advanced, markup=False)
    return res.done, res.was.value, "" if res.done else f"already {res.was.value}"


def _requeue_one(rec, jid: str, dry_run: bool) -> tuple[bool, str, str]:
    from state.search import trials

    state = rec.states([jid])[jid]
    if state is not None and not state.terminal:
        return (
            False,
            state.value,
            f"is {state.value}: requeue runs a failed, cancelled or succeeded job again",
        )
    if dry_run:
        trial = trials.trial_of(rec.r, jid) if state is not None else None
        full = trials.full(rec.r, trial[0]) if trial else ""
        return state is not None and not full, state.value if state else "missing", full
    rerun = trials.requeue(rec, jid)
    if rerun is None:  # no trial: any job
        return True, rec.requeue(jid), ""
    return rerun.done, rerun.was, rerun.why


def cmd_cancel(args) -> int:
    return _act("cancel", args, _cancel_one, _announce_cancelled)


def cmd_requeue(args) -> int:
    return _act("requeue", args, _requeue_one, before=_announce_reruns)


def register(sub) -> None:
    s = sub.add_parser(
        "status", help="every job's state, times and real error; --watch for a live view"
    )
    s.add_argument("--watch", "-w", action="store_true", help="redraw live until Ctrl+C")
    s.add_argument(
        "--state",
        action="append",
        default=[],
        metavar="STATE[,STATE]",
        help=(
            "only jobs in these states (queued, waiting, running, succeeded, failed, "
            "cancelled, pruned)"
        ),
    )
    s.add_argument(
        "--name", metavar="GLOB", help="a job name, a sweep's base name, or a glob (* and ?)"
    )
    s.add_argument("--host", metavar="GLOB", help="only jobs on these workers (glob)")
    s.add_argument(
        "--owner", metavar="NAME", help="only jobs this owner published (see `fleet usage`)"
    )
    s.add_argument(
        "--limit",
        type=int,
        default=None,
        help=f"rows to show (default {C.STATUS_MAX_ROWS}; with --json every match; 0: all)",
    )
    s.add_argument(
        "--every", type=float, default=C.STATUS_WATCH_EVERY_S, help="--watch refresh, seconds"
    )
    json_option(s, "counts and rows as JSON (with --watch: one per line)")
    s.add_argument(
        "--wide",
        action="store_true",
        help=(
            "every column (owner, queue, tries, artifact) and whole notes, "
            "however wide the terminal"
        ),
    )
    s.add_argument(
        "--all",
        action="store_true",
        help="a search's trials as rows too (else one line per search)",
    )
    s.add_argument(
        "--tree",
        action="store_true",
        help="draw each pipeline (after/inputs/params_from), upstream above follower, with "
        "each step's state; --name/--state pick the pipelines holding a matching step",
    )
    s.set_defaults(fn=cmd_status)
    s = sub.add_parser(
        "show", help="one job's record: state, where it ran, progress, error, artifact"
    )
    s.add_argument("job", help="job name, ID, or ID prefix (4+ characters)")
    json_option(s, "the whole record as JSON")
    s.set_defaults(fn=cmd_show)
    for name, fn, text in (
        ("cancel", cmd_cancel, "cancel queued or running jobs"),
        ("requeue", cmd_requeue, "run failed, cancelled or succeeded jobs again"),
    ):
        s = sub.add_parser(name, help=text)
        s.add_argument(
            "jobs",
            nargs="+",
            metavar="JOB",
            help="job name, ID, ID prefix, a sweep's base name (gbt-wine), or a glob ('gbt-*')",
        )
        s.add_argument(
            "--yes",
            "-y",
            action="store_true",
            help=f"go ahead when more than {C.CONFIRM_ABOVE_JOBS} jobs match",
        )
        s.add_argument("--dry-run", action="store_true", help="list what would be done, do nothing")
        json_option(s, "what was done and skipped, as JSON")
        s.set_defaults(fn=fn)
