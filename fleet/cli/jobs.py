"""Job verbs: `fleet status`, `show`, `cancel`, `requeue`."""
from __future__ import annotations

import json

from rich.table import Table

from fleet import events
from fleet.cli.common import app, console, err, plain, records


def cmd_status(args) -> int:
    recs = records().all()
    if args.json:
        print(json.dumps([r.to_dict() for r in recs], indent=2, default=str))
        return 0
    table = Table(title=f"{len(recs)} job(s)")
    for col in ("job", "id", "state", "queue", "tries", "worker", "progress / error", "artifact"):
        table.add_column(col, overflow="fold")
    for r in recs:
        note = ""
        if r.state.value == "running" and r.progress:
            m = r.progress.get("metrics") or {}
            note = f"{r.progress.get('elapsed_s', 0):.0f}s " + " ".join(f"{k}={v}" for k, v in list(m.items())[:3])
        elif r.last_error:
            note = r.last_error.splitlines()[0][:80]
        art = (r.artifact or {}).get("sha256", "")[:12]
        table.add_row(*plain(r.name, r.job_id[:12], r.state.value, r.queue, str(r.attempts), r.worker or "", note,
                             art))
    console.print(table)
    return 0


def cmd_show(args) -> int:
    rec = records()
    print(json.dumps(rec.get(rec.resolve(args.job)).to_dict(), indent=2, default=str))
    return 0


def cmd_cancel(args) -> int:
    rec = records()
    jid = rec.resolve(args.job)
    res = rec.cancel(jid)
    if res.startswith("ok:"):
        events.announce_cancelled(app(), [jid] if res == "ok:queued" else [])
        console.print(f"cancelled {args.job} (was {res[3:]})", markup=False)
        return 0
    err.print(f"{args.job} is {res}: only queued or running jobs can be cancelled", markup=False)
    return 1


def cmd_requeue(args) -> int:
    rec = records()
    jid = rec.resolve(args.job)
    prior = rec.requeue(jid)
    if prior in ("queued", "running"):
        err.print(f"{args.job} is {prior}: requeue runs a failed, cancelled or succeeded job again", markup=False)
        return 1
    events.announce_requeued(app(), rec.r, [jid])
    console.print(f"requeued {args.job} (was {prior})", markup=False)
    return 0


def register(sub) -> None:
    s = sub.add_parser("status", help="every job's state")
    s.add_argument("--json", action="store_true")
    s.set_defaults(fn=cmd_status)
    for name, fn, text in (("show", cmd_show, "one job's whole record"),
                           ("cancel", cmd_cancel, "cancel a queued or running job"),
                           ("requeue", cmd_requeue, "run a failed, cancelled or succeeded job again")):
        s = sub.add_parser(name, help=text)
        s.add_argument("job", help="job name, ID or ID prefix")
        s.set_defaults(fn=fn)
