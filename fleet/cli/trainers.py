"""`fleet trainers`: the built-in trainers and their hyperparameters.

Every hyperparameter of each trainer, with its type, range and default.
"""

from __future__ import annotations

from rich.table import Table
from rich.text import Text

from fleet.cli.common import console, emit, json_option, plain


def cmd_trainers(args) -> int:
    from fleet.query import trainers as T

    if args.markdown:
        print(T.markdown(), end="")
        return 0
    rows = T.rows(args.trainer)
    if not rows:
        from core.errors import UsageError
        from manifest.hyper import TRAINERS

        raise UsageError(
            f"no built-in trainer {args.trainer!r}; choose from {', '.join(TRAINERS)} "
            "(or give a job `command = [...]` instead of a model)"
        )
    return emit(args, lambda: [r.to_dict() for r in rows], lambda: print_trainers(rows))


def print_trainers(rows) -> None:
    for trainer in dict.fromkeys(r.trainer for r in rows):
        table = Table(
            title=Text(
                f'{trainer}: in a job, model = "{trainer}" and hyper = {{ name = value, ... }}'
            ),
            title_justify="left",
        )
        for col in ("hyperparameter", "type", "default", "range", "meaning"):
            table.add_column(col, no_wrap=col in ("hyperparameter", "type", "default"))
        for r in rows:
            if r.trainer == trainer:
                table.add_row(*plain(r.name, r.type, repr(r.default), r.range, r.help))
        console.print(table)


def register(sub) -> None:
    s = sub.add_parser("trainers", help="the built-in trainers and every hyperparameter they take")
    s.add_argument("trainer", nargs="?", help="only this trainer (gbt, mlp)")
    json_option(s, "one object per hyperparameter, as JSON")
    s.add_argument("--markdown", action="store_true", help="the table docs/manifest.md shows")
    s.set_defaults(fn=cmd_trainers)
