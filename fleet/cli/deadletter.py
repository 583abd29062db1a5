"""`fleet dead-letter`: queue entries workers set aside (poison, unpublished messages)."""

from __future__ import annotations

import time

from rich.table import Table

from fleet.cli.common import console, emit, json_option, plain, redis_client


def cmd_dead_letter(args) -> int:
    from core import constants as C
    from state.deadletter import entries

    client = redis_client()
    rows = entries(client, limit=args.limit)
    if args.clear:
        client.delete(C.DEAD_LETTER_KEY)
    return emit(args, rows, lambda: print_entries(rows, args.clear))


def print_entries(rows: list[dict], cleared: bool) -> None:
    from core import constants as C

    if not rows:
        console.print(
            f"no entries in {C.DEAD_LETTER_KEY}: no worker has set a queue entry aside",
        )
        return
    table = Table("set aside", "queue", "worker", "reason", "entry")
    for e in rows:
        at = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(e["at"])) if e.get("at") else "?"
        table.add_row(
            *plain(
                at,
                e.get("queue", ""),
                e.get("worker", ""),
                e.get("reason", ""),
                (e.get("entry") or "")[:60],
            )
        )
    console.print(table)
    console.print(
        f"{len(rows)} entr{'y' if len(rows) == 1 else 'ies'} in {C.DEAD_LETTER_KEY}"
        + ("; cleared" if cleared else ""),
    )


def register(sub) -> None:
    s = sub.add_parser("dead-letter", help="queue entries workers set aside instead of running")
    s.add_argument("--limit", type=int, default=100, help="newest entries to show (default 100)")
    json_option(s, "the entries as a JSON list")
    s.add_argument("--clear", action="store_true", help="empty the list after showing it")
    s.set_defaults(fn=cmd_dead_letter)
