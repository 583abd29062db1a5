"""`fleet share`: owners' weights for fair share, and where each owner stands."""

from __future__ import annotations

from rich.text import Text

from core.errors import ConfigError
from fleet import owners
from fleet.cli.common import console, emit, json_option, redis_client
from fleet.cli.tables import Layout
from fleet.query import shares as S
from fleet.query.jobs import human_hours, human_span
from state import fairshare

SHARES = Layout(
    columns=("owner", "share", "GPU-h", "core-h", "standing", "waiting"),
    always=("owner", "share", "GPU-h", "standing"),
    optional=("waiting", "core-h"),
    right=("share", "GPU-h", "core-h", "standing", "waiting"),
)


def cells(row: S.ShareRow) -> dict:
    s = row.standing
    return {
        "owner": Text(s.owner),
        "share": f"{s.share:g}",
        "GPU-h": human_hours(s.gpu_hours),
        "core-h": human_hours(s.core_hours),
        "standing": f"{s.standing:,.2f}",
        "waiting": f"{row.waiting:,}",
    }


def cmd_share_set(args) -> int:
    owner = owners.validate(args.name, source="fleet share set NAME")
    fairshare.set_share(redis_client(), owner, args.weight)
    console.print(f"{owner}: share {args.weight:g}")
    return 0


def cmd_share_list(args) -> int:
    v = S.read_shares(redis_client())
    return emit(args, v.to_dict, lambda: print_shares(v))


def print_shares(v) -> None:
    if not v.rows:
        console.print("no owner has usage, a share or jobs waiting yet")
        return
    table, _ = SHARES.table([cells(r) for r in v.rows], console.width)
    console.print(table)
    console.print(
        f"usage halves every {human_span(v.half_life_s)}; standing: GPU-h per share, lowest "
        "served first",
    )


def _weight(text: str) -> float:
    import argparse

    try:
        return fairshare.validate_share(float(text))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: give a positive number, e.g. 2") from None
    except ConfigError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def register(sub) -> None:
    s = sub.add_parser("share", help="fair share: owners' weights and standing")
    verbs = s.add_subparsers(
        dest="share_verb", required=True, metavar="{set,list}", help="set or list"
    )
    st = verbs.add_parser("set", help="set an owner's share (weight; default 1)")
    st.add_argument(
        "name", metavar="NAME", help="the owner (as `fleet publish --owner` names them)"
    )
    st.add_argument(
        "weight",
        metavar="WEIGHT",
        nargs="?",
        type=_weight,
        default=1.0,
        help="their weight: 2 is twice the fair share of an owner with 1 (default 1)",
    )
    st.set_defaults(fn=cmd_share_set)
    ls = verbs.add_parser(
        "list", help="owners, weight, decayed usage, standing (lowest served first)"
    )
    json_option(ls)
    ls.set_defaults(fn=cmd_share_list)
