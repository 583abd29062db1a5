"""`fleet export`: a search or a set of jobs written to the tools people already use.

One sub-verb per tool: ``optuna`` (a search as an Optuna study, for optuna-dashboard).
"""
from __future__ import annotations

from fleet.cli.common import console, err, redis_client


def cmd_export_optuna(args) -> int:
    from state.search import find_searches
    from state.study import export
    client = redis_client()
    found = find_searches(client, args.name)
    if not found:
        err.print(f"no search named {args.name!r}; `fleet status` lists searches", markup=False)
        return 1
    n = export(client, found[0], args.name, args.storage)
    console.print(f"wrote search {args.name} ({n} trials) as Optuna study {args.name!r} to {args.storage}",
                  markup=False, highlight=False)
    return 0


def register(sub) -> None:
    s = sub.add_parser("export", help="write a search or jobs to another tool (optuna)")
    tools = s.add_subparsers(dest="tool", required=True)
    o = tools.add_parser("optuna", help="a search as an Optuna study (optuna-dashboard opens it)")
    o.add_argument("name", help="the search's name (its manifest job's name)")
    o.add_argument("--storage", required=True, help="an Optuna storage URL, e.g. sqlite:///study.db")
    o.set_defaults(fn=cmd_export_optuna)
