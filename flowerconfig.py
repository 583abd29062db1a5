"""Flower's settings for fleet; Flower runs this file at start when it is in the working
directory (``celery -A tasks flower`` from the repository root, as compose and the README do).

Flower refuses to start without authentication: set ``FLOWER_BASIC_AUTH=user:password``
(several users: comma-separated), or pass ``--basic-auth``/``--auth``; or, for a try on your
own machine only, ``FLOWER_UNAUTHENTICATED=1``. It listens on 127.0.0.1 unless
``FLOWER_ADDRESS`` (or ``--address``) says otherwise. ``--persistent`` (``FLOWER_PERSISTENT=1``)
keeps its task history across restarts in ``FLOWER_DB`` (default ``flower``).

Module-level names that match a Flower option set it (tornado's config files); helpers are
underscored so they do not.
"""
import os
import sys

from fleet import flower_extras as _extras


def _cli_has(*names):
    given = {a.lstrip("-").split("=")[0].replace("-", "_") for a in sys.argv if a.startswith("--")}
    return bool(given & set(names))


def _basic_auth(raw):
    users = [u.strip() for u in raw.split(",") if u.strip()]
    for i, user in enumerate(users):
        name, sep, password = user.partition(":")
        if not (sep and name and password):
            raise SystemExit(f"FLOWER_BASIC_AUTH entry {i + 1} ({name or '?'}): expected user:password "
                             "(several users: comma-separated), e.g. FLOWER_BASIC_AUTH=admin:a-long-secret")
    return users


address = os.environ.get("FLOWER_ADDRESS") or "127.0.0.1"
if os.environ.get("FLOWER_BASIC_AUTH"):
    basic_auth = _basic_auth(os.environ["FLOWER_BASIC_AUTH"])
elif not (_cli_has("basic_auth", "auth") or os.environ.get("FLOWER_AUTH")
          or os.environ.get("FLOWER_UNAUTHENTICATED", "").lower() in ("1", "true", "yes")):
    raise SystemExit("fleet's flowerconfig.py: refusing to start Flower without authentication; "
                     "set FLOWER_BASIC_AUTH=user:password (or --basic-auth=user:password), "
                     "or FLOWER_UNAUTHENTICATED=1 for a local try on 127.0.0.1")

_extras.install()
