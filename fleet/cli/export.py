"""`fleet export TOOL NAME`: a search, a sweep or jobs sharing a name, written to the tools
people already use. One sub-verb per tool; each takes the leaderboard's NAME (optuna: a
search's name)."""

from __future__ import annotations

from core.errors import FleetError
from fleet.cli.common import console, emit, json_option, redis_client
from fleet.query import results as R


def cmd_export_mlflow(args) -> int:
    from fleet.mlflow_export import MlflowExport

    board = R.leaderboard(redis_client(), args.name, metric=args.metric)
    done = MlflowExport(args.tracking_uri).write(board, args.experiment)
    return emit(
        args,
        done.to_dict,
        lambda: console.print(
            f"{args.name}: {done.created} run(s) created, {done.updated} updated, "
            f"{done.unchanged} unchanged, {done.points} metric point(s) logged in experiment "
            f"{done.experiment_id} at {args.tracking_uri}"
        ),
    )


def cmd_export_optuna(args) -> int:
    from dataclasses import replace

    from fleet.optuna_export import write
    from state.search.view import find_searches, read_search

    client = redis_client()
    found = find_searches(client, args.name)
    search = read_search(client, found[0], trials=False) if found else None
    if search is None:
        raise FleetError(f"no search named {args.name!r}; `fleet status` lists searches")
    board = R.leaderboard(client, args.name, metric=search.metric, direction=search.direction.value)
    # only this search's trials: jobs of other kinds may share its name
    board = replace(board, trials=[t for t in board.trials if t.search == search.search_id])
    done = write(board, search.config.space, search.direction.value, args.name, args.storage)
    console.print(
        f"wrote search {args.name} ({done.trials} trials) as Optuna study {args.name!r} to "
        f"{args.storage}" + (" (replacing the earlier export)" if done.replaced else ""),
        soft_wrap=True,
    )
    return 0


def register(sub) -> None:
    s = sub.add_parser(
        "export", help="write a search, a sweep or jobs sharing a name to MLflow or Optuna"
    )
    tools = s.add_subparsers(
        dest="tool", required=True, metavar="TOOL", help="the tool to write to"
    )
    m = tools.add_parser(
        "mlflow", help="each trial or job as an MLflow run (again: updated, never duplicated)"
    )
    m.add_argument("name", help="a search's or sweep's name, one job's name, or a glob")
    m.add_argument(
        "--tracking-uri",
        required=True,
        metavar="URI",
        help="the MLflow tracking store: sqlite:///mlflow.db, http://host:5000, ...",
    )
    m.add_argument("--experiment", metavar="NAME", help="the MLflow experiment (default: NAME)")
    m.add_argument(
        "--metric", help="the metric the runs are tagged with (default as in `fleet results`)"
    )
    json_option(m, "what was created and updated, as JSON")
    m.set_defaults(fn=cmd_export_mlflow)
    o = tools.add_parser("optuna", help="a search as an Optuna study (optuna-dashboard opens it)")
    o.add_argument("name", help="the search's name (its manifest job's name)")
    o.add_argument(
        "--storage", required=True, help="an Optuna storage URL, e.g. sqlite:///study.db"
    )
    o.set_defaults(fn=cmd_export_optuna)
