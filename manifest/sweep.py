"""Expand a ``[jobs.sweep]`` table into the cross product of its lists."""
from __future__ import annotations

import itertools
import json
from typing import Any


def expand(sweep: dict[str, list[Any]]) -> list[dict[str, Any]]:
    """Every combination of the sweep's lists, keys in sorted order for stable names."""
    keys = sorted(sweep)
    return [dict(zip(keys, combo)) for combo in itertools.product(*(sweep[k] for k in keys))]


def point_name(base: str, point: dict[str, Any]) -> str:
    """``base[k1=v1,k2=v2]``: a readable, unique name for one sweep point."""
    if not point:
        return base
    return f"{base}[" + ",".join(f"{k}={_label(v)}" for k, v in point.items()) + "]"


def _label(value: Any) -> str:
    # strings are quoted so that k = [1, "1"] gives two names, k=1 and k="1"
    return json.dumps(value, ensure_ascii=False) if isinstance(value, str) else str(value)
