"""`fleet export TOOL NAME`: a search, a sweep or jobs sharing a name, written to the tools
people already use. One sub-verb per tool; each takes the leaderboard's NAME."""
from __future__ import annotations

import json

from fleet.cli.common import console, redis_client
from fleet.query import results as R


def cmd_export_mlflow(args) -> int:
    from fleet.mlflow_export import MlflowExport
    board = R.leaderboard(redis_client(), args.name, metric=args.metric)
    done = MlflowExport(args.tracking_uri).write(board, args.experiment)
    if args.json:
        print(json.dumps(done.to_dict(), indent=2))
    else:
        console.print(f"{args.name}: {done.created} run(s) created, {done.updated} updated, {done.points} metric "
                      f"point(s) logged in experiment {done.experiment_id} at {args.tracking_uri}",
                      markup=False, highlight=False)
    return 0


def register(sub) -> None:
    s = sub.add_parser("export", help="write a search, a sweep or jobs sharing a name to MLflow")
    tools = s.add_subparsers(dest="tool", required=True, metavar="TOOL", help="the tool to write to")
    m = tools.add_parser("mlflow", help="each trial or job as an MLflow run (again: updated, never duplicated)")
    m.add_argument("name", help="a search's or sweep's name, one job's name, or a glob")
    m.add_argument("--tracking-uri", required=True, metavar="URI",
                   help="the MLflow tracking store: sqlite:///mlflow.db, http://host:5000, ...")
    m.add_argument("--experiment", metavar="NAME", help="the MLflow experiment (default: NAME)")
    m.add_argument("--metric", help="the metric the runs are tagged with (default as in `fleet results`)")
    m.add_argument("--json", action="store_true", help="what was created and updated, as JSON")
    m.set_defaults(fn=cmd_export_mlflow)
