"""`fleet usage`: jobs, failures, GPU-hours and core-hours per owner over a recent window."""
from __future__ import annotations

import json

from rich.table import Table

from fleet.cli.common import console, plain, redis_client
from fleet.query import usage as U
from fleet.query.jobs import human_duration


def render(v: U.UsageView) -> Table:
    table = Table(title=f"usage over the last {human_duration(v.since_s)} (latest run of each job)")
    for col in ("owner", "jobs", "failures", "GPU-h", "core-h"):
        table.add_column(col, justify="left" if col == "owner" else "right")
    for u in v.owners:
        table.add_row(*plain(u.owner, f"{u.jobs:,}", f"{u.failures:,}", f"{u.gpu_hours:,.1f}", f"{u.core_hours:,.1f}"))
    return table


def cmd_usage(args) -> int:
    v = U.read_usage(redis_client(), U.parse_since(args.since))
    if args.json:
        print(json.dumps(v.to_dict(), indent=2))
    elif not v.owners:
        console.print(f"no jobs published, running or ended in the last {human_duration(v.since_s)}",
                      markup=False, highlight=False)
    else:
        console.print(render(v))
    return 0


def register(sub) -> None:
    s = sub.add_parser("usage", help="jobs, failures, GPU-hours and core-hours per owner")
    s.add_argument("--since", default=U.DEFAULT_SINCE, metavar="AGE",
                   help=f"the window: a number and m, h, d or w (default {U.DEFAULT_SINCE})")
    s.add_argument("--json", action="store_true", help="machine-readable output")
    s.set_defaults(fn=cmd_usage)
