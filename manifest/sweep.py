"""A job's ``[jobs.sweep]`` table: its checks, the cross product of its lists, point names,
and the hyper values (written or swept) checked against the trainer's schema."""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from typing import Any

from manifest.fields import MAX_SEED, date_problem
from manifest.hyper import TRAINERS, check_hyper, unknown_key_fix
from manifest.problems import Problems


def expand(sweep: dict[str, list[Any]]) -> list[dict[str, Any]]:
    """Every combination of the sweep's lists, keys in sorted order for stable names."""
    keys = sorted(sweep)
    return [
        dict(zip(keys, combo, strict=True))
        for combo in itertools.product(*(sweep[k] for k in keys))
    ]


def point_name(base: str, point: dict[str, Any]) -> str:
    """``base[k1=v1,k2=v2]``: a readable, unique name for one sweep point."""
    if not point:
        return base
    return f"{base}[" + ",".join(f"{k}={_label(v)}" for k, v in point.items()) + "]"


def _label(value: Any) -> str:
    # strings are quoted so that k = [1, "1"] gives two names, k=1 and k="1"
    return json.dumps(value, ensure_ascii=False) if isinstance(value, str) else str(value)


def sweep_points(p: Problems, path: tuple, t: dict) -> list[dict]:
    """The points of job table ``t`` (one empty point without a sweep); none when the
    sweep has a problem, each reported at its key."""
    raw = t.get("sweep")
    if not raw:
        return [{}]
    problems = [bad for key, values in raw.items() if (bad := _sweep_problem(key, values, t))]
    for key, message, fix in problems:
        p.add(path + ("sweep", key), message, fix)
    return [] if problems else expand(raw)


def _sweep_problem(key: str, values: Any, t: dict) -> tuple[str, str, str] | None:
    """(key, message, fix) for one swept key that cannot expand, else None."""
    if not isinstance(values, list) or not values:
        return key, "a sweep value must be a non-empty list", f"write {key} = [a, b, ...]"
    if key == "seed" and not all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        return key, "seeds must be integers", "write seed = [0, 1, 2]"
    if key == "seed" and (bad := [v for v in values if not 0 <= v <= MAX_SEED]):
        return (
            key,
            f"seeds must be 0..{MAX_SEED}, got {bad[0]}",
            "numpy and xgboost take 32-bit seeds",
        )
    if key != "seed" and key in (t.get("hyper") or {}):
        return key, f"{key} is set in both hyper and sweep", "keep it in one place"
    return None


def _hyper_values(t: dict) -> Iterator[tuple[tuple, str, Any]]:
    """(where, key, value) for every written hyper value and every swept one."""
    for key, value in (t.get("hyper") or {}).items():
        yield ("hyper", key), key, value
    for key, values in (t.get("sweep") or {}).items():
        if key != "seed" and isinstance(values, list):
            for value in values:
                yield ("sweep", key), key, value


def _sweep_fix(model: str, key: str, fix: str) -> str:
    """A sweep may also name ``seed``: an unknown swept key is matched against it too."""
    params = TRAINERS[model]
    return fix if key in params else unknown_key_fix(key, [*params, "seed"])


def hyper_problems(p: Problems, path: tuple, t: dict) -> None:
    """Report every bad hyper value, written or swept, once each.

    Values are checked one by one, not point by point: a sweep's cross product would repeat
    each bad value once per point it is in.
    """
    reported = set()
    for where, key, value in _hyper_values(t):
        if t.get("model") in TRAINERS:  # its schema rejects dates too: no trainer takes one
            bad = [
                (m, _sweep_fix(t["model"], k, f) if where[0] == "sweep" else f)
                for k, m, f in check_hyper(t["model"], {key: value})
            ]
        else:
            bad = [b] if (b := date_problem(value)) else []
        for message, fix in bad:
            if (where, message) not in reported:
                reported.add((where, message))
                p.add(path + where, message, fix)
