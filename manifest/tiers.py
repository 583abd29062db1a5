"""The ``[tiers]`` table: capability tiers, each a queue name and the floor its hosts meet.

Without the table the default tiers apply; with it, only the tiers it names.
"""

from __future__ import annotations

import re

from manifest.fields import NEED_FIELDS, check_needs, check_table, read_needs
from manifest.problems import Problems
from manifest.schema import DEFAULT_TIERS, TierSpec, ordered

TIER_FIELDS = NEED_FIELDS
QUEUE_SAFE = re.compile(r"^[a-z0-9][a-z0-9_-]*$")


def read_tiers(p: Problems, raw: dict | None) -> tuple[TierSpec, ...]:
    """The manifest's tiers, most demanding first; the defaults when none are written."""
    if not raw:
        return DEFAULT_TIERS
    out = []
    for name, table in raw.items():
        path = ("tiers", name)
        if not QUEUE_SAFE.match(name):
            p.add(
                path,
                f"tier name {name!r} is not a usable queue name",
                "use lowercase letters, digits, '-' and '_' (no dots)",
            )
        if not isinstance(table, dict):
            p.add(path, "must be a table", f"write it as [tiers.{name}]")
            continue
        t = check_table(p, path, table, TIER_FIELDS)
        check_needs(p, path, t)
        if t.get("min_vram_gib", 0) > 0 and not t.get("require_cuda", False):
            p.add(
                path + ("min_vram_gib",),
                "a VRAM floor needs require_cuda = true",
                "add require_cuda = true to this tier",
            )
        out.append(TierSpec(name, read_needs(t)))
    return ordered(out)
