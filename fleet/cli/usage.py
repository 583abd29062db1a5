"""`fleet usage`: jobs, failures, GPU-hours and core-hours per owner over a recent window."""

from __future__ import annotations

from rich.table import Table

from fleet.cli.common import console, emit, json_option, plain, redis_client
from fleet.query import usage as U
from fleet.query.jobs import human_hours, human_span


def heading(v: U.UsageView) -> str:
    # a line of its own: as a table title it wrapped mid-phrase on a narrow terminal
    return f"usage over the last {human_span(v.since_s)} (every run of the jobs active in it):"


def render(v: U.UsageView) -> Table:
    table = Table()
    for col in ("owner", "jobs", "failures", "GPU-h", "core-h"):
        table.add_column(col, justify="left" if col == "owner" else "right", no_wrap=col != "owner")
    for u in v.owners:
        table.add_row(
            *plain(
                u.owner,
                f"{u.jobs:,}",
                f"{u.failures:,}",
                human_hours(u.gpu_hours),
                human_hours(u.core_hours),
            )
        )
    return table


def cmd_usage(args) -> int:
    v = U.read_usage(redis_client(), U.parse_since(args.since))
    return emit(args, v.to_dict, lambda: print_usage(v))


def print_usage(v: U.UsageView) -> None:
    if not v.owners:
        console.print(f"no jobs published, running or ended in the last {human_span(v.since_s)}")
    else:
        console.print(heading(v))
        console.print(render(v))


def register(sub) -> None:
    s = sub.add_parser("usage", help="jobs, failures, GPU-hours and core-hours per owner")
    s.add_argument(
        "--since",
        default=U.DEFAULT_SINCE,
        metavar="AGE",
        help=f"the window: a number and m, h, d or w (default {U.DEFAULT_SINCE})",
    )
    json_option(s)
    s.set_defaults(fn=cmd_usage)
