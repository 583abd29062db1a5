"""`fleet store`: the fleet's store, recorded in Redis (``state.fleetstore``): show or set it."""

from __future__ import annotations

from core.registry import FLEET_STORE_URL
from core.secrets import masked
from fleet.cli.common import console, redis_client


def cmd_store_show(args) -> int:
    from state import fleetstore

    url = fleetstore.recorded(redis_client())
    console.print(
        f"the fleet's store: {masked(url)}"
        if url
        else "no store recorded yet: `fleet local`, `fleet enroll` or the first worker "
        f"records its {FLEET_STORE_URL.name}; or `fleet store set URL`",
    )
    return 0


def cmd_store_set(args) -> int:
    from state import fleetstore

    url = usable(args.url)
    before = fleetstore.recorded(client := redis_client())
    fleetstore.record(client, url, replace=True)
    was = f" (was {masked(before)})" if before and not fleetstore.same(before, url) else ""
    console.print(
        f"the fleet's store: {masked(url)}{was}; publishers and workers that name no "
        f"store use it, and one whose {FLEET_STORE_URL.name} names another is refused",
    )
    return 0


def usable(url: str) -> str:
    """``url`` in the form every host reads alike: a file:// path made absolute. A form
    the stores do not accept (or one carrying credentials) is refused, named."""
    from artifacts.stores import FileStore, open_store
    from core.settings import StoreSettings

    store = open_store(StoreSettings.from_env(url=url))
    return store.root.as_uri() if isinstance(store, FileStore) else url


def register(sub) -> None:
    s = sub.add_parser("store", help="the fleet's store (recorded in Redis): show or set it")
    s.set_defaults(fn=cmd_store_show)
    verbs = s.add_subparsers(dest="store_verb", metavar="{show,set}", help="show (default) or set")
    verbs.add_parser("show", help="the store this fleet's publishers and workers use").set_defaults(
        fn=cmd_store_show
    )
    st = verbs.add_parser("set", help="record the fleet's store (it moved, or was set wrong)")
    st.add_argument(
        "url", metavar="URL", help="file:///DIR or s3://BUCKET/PREFIX (credentials from AWS_*)"
    )
    st.set_defaults(fn=cmd_store_set)
