"""`fleet logs JOB [-f]`: a job's output as its workers keep it in Redis."""

from __future__ import annotations

from core import constants as C
from core.errors import UsageError
from core.ids import short_id
from fleet.cli.common import console, err, job_id_for, json_option, records, to_json
from fleet.query import logs as L
from state.gang import rank_log_id


def _emit(entry: L.LogEntry, as_json: bool) -> None:
    if as_json:
        print(to_json(entry.to_dict()), flush=True)
    elif entry.line is not None:
        print(entry.line, flush=True)
    else:
        console.print(entry.text(), style="dim")


def cmd_logs(args) -> int:
    rec = records()
    jid = job_id_for(rec, args.job, "logs")
    job = rec.get(jid)
    problem = L.rank_problem(job.name, job.spec, args.rank)
    if problem:
        raise UsageError(problem)
    lid = rank_log_id(jid, args.rank)  # a gang member's own output (rank 0's is the job's)
    entries = L.read(rec.r, lid, tail=args.tail)
    runs = L.Runs()
    for entry in runs.through(entries):
        _emit(entry, args.json)
    if not entries and not args.follow:
        hint = (
            f"it is {job.state.value}; follow it with `fleet logs {args.job} -f`"
            if not job.state.terminal
            else f"it ran before output was kept, or its log expired "
            f"({C.JOB_LOG_TTL_S // 86400} days after its last line); "
            f"the bundle holds fleet-log.txt: `fleet get {args.job} --extract`"
        )
        err.print(
            f"no output kept for {job.name} ({short_id(jid)}): {hint}",
        )
    if args.follow:
        after = entries[-1].id if entries else ("-" if args.tail is None else _now_id(rec.r, lid))
        try:
            for entry in L.follow(rec.r, lid, after, lambda: rec.states([jid])[jid], runs=runs):
                _emit(entry, args.json)
        except KeyboardInterrupt:
            return 0
        final = rec.get(jid)
        if not args.json:
            err.print(f"{final.name}: {final.state.value}")
    return 0


def _now_id(client, jid: str) -> str:
    """With ``--tail 0 -f``: only what comes from now on."""
    last = client.xrevrange(L.key(jid), count=1)
    return (last[0][0].decode() if isinstance(last[0][0], bytes) else last[0][0]) if last else "-"


def register(sub) -> None:
    s = sub.add_parser(
        "logs",
        help="a job's output (kept in Redis, bounded); -f follows it live",
        description="A job's output, each run between its own marks: '--- attempt N on HOST "
        "started ...' and '... ended ...: HOW', N counting every run of the job "
        "(retries, requeues, hand-backs), HOW saying succeeded, failed (exit 1), "
        "timed out, cancelled, handed back or lost.",
    )
    s.add_argument("job", help="job name, ID, or ID prefix (4+ characters)")
    s.add_argument("-f", "--follow", action="store_true", help="keep printing until the job ends")
    s.add_argument(
        "--rank",
        type=int,
        default=0,
        metavar="N",
        help="a gang's (nodes = N) member of node rank N; rank 0's is the default",
    )
    s.add_argument(
        "--tail", "-n", type=int, default=None, metavar="N", help="only the last N lines"
    )
    json_option(
        s,
        "one JSON object per line or run mark "
        "(a mark has event, run, worker; an end mark outcome and detail)",
    )
    s.set_defaults(fn=cmd_logs)
