"""`fleet artifacts`: list (and verify) what the store holds."""
from __future__ import annotations

from rich.table import Table

from fleet.cli.common import console, plain


def cmd_artifacts(args) -> int:
    from artifacts.store import open_store
    store = open_store(args.store)
    arts = store.list_artifacts()
    table = Table(title=f"artifacts in {args.store or 'FLEET_STORE_URL'}")
    for col in ("job", "kind", "sha256", "size", "verified", "uri"):
        table.add_column(col, overflow="fold")
    ok = True
    for a in arts:
        kind = (a.get("job") or {}).get("model") or "command"
        verified = store.verify(kind, a["sha256"]) if args.verify else None
        ok = ok and verified is not False
        table.add_row(*plain(a.get("name", ""), kind, a["sha256"][:16], f"{a.get('size', 0):,}"),
                      {True: "[green]sha256 ok[/]", False: "[red]MISMATCH[/]", None: "-"}[verified], plain(a["uri"])[0])
    console.print(table)
    return 0 if ok else 1


def register(sub) -> None:
    s = sub.add_parser("artifacts", help="list (and verify) artifacts in the store")
    s.add_argument("--store", default=None, help="store URL (default: FLEET_STORE_URL)")
    s.add_argument("--no-verify", dest="verify", action="store_false")
    s.set_defaults(fn=cmd_artifacts)
