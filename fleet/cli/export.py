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
            f"{done.points} metric point(s) logged in experiment {done.experiment_id} "
            f"at {args.tracking_uri}"
        ),
    )


def cmd_export_optuna(args) -> int:
    from state.search import find_searches
    from state.study import export

    client = redis_client()
    found = find_searches(client, args.name)
    if not found:
        raise FleetError(f"no search named {args.name!r}; `fleet status` lists searches")
    n = export(client, found[0], args.name, args.storage)
    console.print(
        f"wrote search {args.name} ({n} trials) as Optuna study {args.name!r} to {args.storage}",
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
