"""`fleet results NAME` (a leaderboard, best first) and `fleet plot NAME -o FILE` (its pictures)."""

from __future__ import annotations

import csv
import json
import sys

from rich.console import Group
from rich.table import Table
from rich.text import Text

from fleet.cli.common import console, emit, json_option, redis_client, state_cell
from fleet.cli.tables import Layout
from fleet.query import pbt
from fleet.query import results as R

BEST_MARK = "*"
BOARD = Layout(
    columns=("trial", "state", "final", "best", "steps", "host", "usage", "params"),
    always=("trial", "state", "final"),
    # params only whole: when they do not fit they go on their own lines under the table
    optional=("best", "steps", "usage", "host", "params"),
    shrinks={"host": 8},
    right=("final", "best", "steps", "usage"),
)
CSV_COLUMNS = (
    "trial",
    "name",
    "job_id",
    "state",
    "value",
    "best_value",
    "steps",
    "host",
    "gpu_s",
    "core_s",
    "params",
)


def compact(params: dict) -> str:
    """``{"learning_rate": 0.0123, "hidden_sizes": [128, 64]}`` -> ``learning_rate=0.0123
    hidden_sizes=[128,64]``: numbers in 4 significant digits, lists without spaces."""

    def one(v) -> str:
        if isinstance(v, float):
            return f"{v:.4g}"
        return v if isinstance(v, str) else json.dumps(v, separators=(",", ":"))

    return " ".join(f"{k}={one(v)}" for k, v in params.items())


def usage(t: R.Trial) -> str:
    """GPU-seconds when it held GPUs, else core-seconds: ``41 core-s``, ``3.2k GPU-s``."""
    seconds, unit = (t.gpu_s, "GPU-s") if t.gpu_s > 0 else (t.core_s, "core-s")
    if seconds <= 0:
        return ""
    return f"{seconds / 1000:.1f}k {unit}" if seconds >= 10_000 else f"{seconds:.0f} {unit}"


def _cells(t: R.Trial) -> dict:
    style = "bold" if t.best else ""
    return {
        "trial": Text(f"{t.trial}{BEST_MARK if t.best else ''}", style=style),
        "state": state_cell(t.state),
        "final": Text(R.short(t.value), style=style),
        "best": R.short(t.best_value),
        "steps": str(t.steps),
        "host": Text(t.host),
        "usage": usage(t),
        "params": Text(compact(t.params)),
    }


def render(board: R.Leaderboard, *, width: int | None = None, wide: bool = False) -> Group:
    """The leaderboard for a ``width``-wide terminal: a summary line, the metric, the table,
    and the params of each trial under it when the table has no room for them."""
    rows = [_cells(t) for t in board.trials]
    table, widths = BOARD.table(rows, width or console.width, wide)
    parts: list = [
        Text(board.summary(), style="bold"),
        Text(f"metric: {board.objective.describe()}; {BEST_MARK} marks the best", style="dim"),
        table,
    ]
    if "params" not in widths and any(t.params for t in board.trials):
        parts += [Text("params:", style="dim"), _params_below(board)]
    if board.population is not None:
        parts += _lineage(board)
    reasons = [t.reason for t in board.trials if t.reason]
    if reasons:  # a failed trial's row has no value: say why under the table
        parts += [Text("failed:", style="dim"), *(Text("  " + r) for r in reasons)]
    return Group(*parts)


def _params_below(board: R.Leaderboard) -> Table:
    """Each trial's params on lines of their own, wrapped under themselves."""
    grid = Table.grid(padding=(0, 2), pad_edge=True)
    grid.add_column(no_wrap=True, justify="right")
    grid.add_column(overflow="fold")
    for t in board.trials:
        grid.add_row(Text(f"{t.trial}{BEST_MARK if t.best else ''}"), Text(compact(t.params)))
    return grid


def _lineage(board: R.Leaderboard) -> list:
    """Each PBT member that took another's checkpoint: its first values, then each exploit in
    order (``step 20: took member 3's checkpoint, lr 0.0012 -> 0.00144``), best first."""
    pop = board.population
    lines = pbt.lineages(pop)
    members = {m.number: m for m in pop.members}
    grid = Table.grid(padding=(0, 2), pad_edge=True)
    grid.add_column(no_wrap=True, justify="right")
    grid.add_column(overflow="fold")
    for t in board.trials:
        m = members.get(t.trial)
        if m is None or not lines.get(m.number):
            continue
        first = m.schedule[0].values if m.schedule else {}
        mark = f"{t.trial}{BEST_MARK if t.best else ''}"
        grid.add_row(Text(mark), Text(f"step 0: {compact(dict(first))}"))
        for line in lines[m.number]:
            grid.add_row(Text(""), Text(line))
    n = len(pop.exploits)
    head = f"lineage: {n} exploit{'s' * (n != 1)}" + (
        ", each member's in order" if n else "; every member kept its own values"
    )
    return [Text(head, style="dim"), grid] if n else [Text(head, style="dim")]


def write_csv(board: R.Leaderboard, out=None) -> None:
    writer = csv.writer(out or sys.stdout)
    writer.writerow(CSV_COLUMNS)
    for t in board.trials:
        writer.writerow(
            [
                t.trial,
                t.name,
                t.job_id,
                t.state,
                "" if t.value is None else t.value,
                "" if t.best_value is None else t.best_value,
                t.steps,
                t.host,
                t.gpu_s,
                t.core_s,
                json.dumps(t.params, separators=(",", ":")),
            ]
        )


def cmd_results(args) -> int:
    board = R.leaderboard(redis_client(), args.name, metric=args.metric, direction=args.direction)
    if args.csv:
        write_csv(board)
        return 0
    return emit(args, board.to_list, lambda: console.print(render(board, wide=args.wide)))


def cmd_plot(args) -> int:
    from fleet import plot
    from fleet.query import plotdata

    client = redis_client()
    board = R.leaderboard(client, args.name, metric=args.metric, direction=args.direction)
    search = R.search_of(client, args.name, [t.search for t in board.trials])
    path = plot.save(plotdata.prepare(board, (search or {}).get("space")), args.output)
    console.print(
        f"wrote {path}: {len(board.trials)} trials, {board.objective.describe()}",
    )
    return 0


def _objective_args(s) -> None:
    s.add_argument(
        "name", help="a search's or sweep's name (tune-mlp), one job's name, or a glob ('tune-*')"
    )
    s.add_argument(
        "--metric",
        help="the metric key to rank by (default: the search's, else valid_loss "
        "when reported, else the first key reported)",
    )
    s.add_argument(
        "--direction",
        choices=[d.value for d in R.Direction],
        help="which way is better (default: the search's, else guessed from the metric's name)",
    )


def register(sub) -> None:
    s = sub.add_parser(
        "results", help="a leaderboard of a search, a sweep or jobs sharing a name, best first"
    )
    _objective_args(s)
    out = s.add_mutually_exclusive_group()
    json_option(out, "a list of trials, best first")
    out.add_argument("--csv", action="store_true", help="one row per trial, best first")
    s.add_argument("--wide", action="store_true", help="every column, however wide the terminal")
    s.set_defaults(fn=cmd_results)
    s = sub.add_parser(
        "plot", help="learning curves, best-so-far and each parameter against the metric"
    )
    _objective_args(s)
    s.add_argument(
        "-o", "--output", required=True, metavar="FILE", help="the picture: .png, .svg or .pdf"
    )
    s.set_defaults(fn=cmd_plot)
