"""Who a job belongs to: the one rule for an owner's name, for a manifest's ``owner`` key
and for `fleet publish --owner` / ``FLEET_OWNER`` alike (fair share counts by it)."""

from __future__ import annotations

import re

OWNER_MAX_CHARS = 64
OWNER_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@+-]*\Z")
OWNER_RULE = (
    f"an owner is 1-{OWNER_MAX_CHARS} characters of letters, digits and . _ @ + -, "
    "starting with a letter or digit (e.g. alice or alice@lab3)"
)


def owner_ok(name: str) -> bool:
    return bool(name) and len(name) <= OWNER_MAX_CHARS and bool(OWNER_RE.match(name))
