"""Field kinds: read a TOML table against its known keys and the kind of each value.

Every table of a manifest is read the same way: unknown keys get the closest known one,
values of the wrong kind are named with the kind expected, and only well-typed values go
on to the checks of their noun (tiers, hosts, jobs). Resource needs are bounded here too,
as tiers and jobs state them alike.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import shlex
from typing import Any

from core.constants import MAX_CORES, MAX_GPUS, MAX_RAM_GIB, MAX_VRAM_GIB
from manifest.problems import Problems, suggest
from manifest.schema import Needs

KIND_WORDS = {
    "bool": "true or false",
    "int": "an integer",
    "num": "a number",
    "str": "a string",
    "strs": "a list of strings",
    "table": "a table",
    "tables": "a list of tables",
    "str|strs": "a string or a list of strings",
}
# what a tier's floor and a job's needs share; each need is bounded by what no host exceeds
NEED_FIELDS = {
    "require_cuda": "bool",
    "min_vram_gib": "num",
    "min_ram_gib": "num",
    "min_cores": "int",
    "gpus": "int",
}
MAX_SEED = 2**32 - 1  # numpy's and xgboost's seeds are unsigned 32-bit
# key -> (bound, what it bounds, the unit a fix names)
NEED_BOUNDS = {
    "min_vram_gib": (MAX_VRAM_GIB, "GiB of VRAM on one device", "GiB"),
    "min_ram_gib": (MAX_RAM_GIB, "GiB of RAM", "GiB"),
    "min_cores": (MAX_CORES, "cores", "logical cores"),
    "gpus": (MAX_GPUS, "GPUs on one host", "GPUs"),
}


def is_kind(value: Any, kind: str) -> bool:
    """True when ``value`` is of ``kind`` (a key of KIND_WORDS); a bool is never a number."""
    if kind == "bool":
        return isinstance(value, bool)
    if kind == "int":
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "num":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if kind == "str":
        return isinstance(value, str)
    if kind == "str|strs":
        return is_kind(value, "str") or is_kind(value, "strs")
    if kind == "strs":
        return isinstance(value, list) and all(isinstance(v, str) for v in value)
    if kind == "table":
        return isinstance(value, dict)
    return isinstance(value, list) and all(isinstance(v, dict) for v in value)


def check_table(p: Problems, path: tuple, table: dict, fields: dict[str, str]) -> dict:
    """Report unknown keys and wrong kinds; return only the well-typed entries."""
    good = {}
    for key, value in table.items():
        if key not in fields:
            p.add(path + (key,), "unknown key", suggest(key, fields))
        elif not is_kind(value, fields[key]):
            p.add(path + (key,), *wrong_kind(key, value, fields[key]))
        elif isinstance(value, float) and not math.isfinite(value):  # TOML has inf and nan
            p.add(
                path + (key,), f"must be a finite number, got {value}", "write a number, e.g. 1.5"
            )
        else:
            good[key] = value
    return good


def wrong_kind(key: str, value: Any, kind: str) -> tuple[str, str]:
    """(message, fix) for a value of the wrong kind; two common slips get a fix of their own."""
    if key == "command" and isinstance(value, str):  # a shell line where an argv list belongs
        return f"must be an argv list, got the string {value!r}", f"write command = {_argv(value)}"
    if key == "jobs" and isinstance(value, dict):  # [jobs] where [[jobs]] was meant
        return (
            "is a single [jobs] table, not a list of jobs",
            "use [[jobs]] (double brackets) for each job",
        )
    return f"must be {KIND_WORDS[kind]}, got {value!r}", f"write it as {KIND_WORDS[kind]}"


def _argv(line: str) -> str:
    try:
        words = shlex.split(line)
    except ValueError:  # unbalanced quotes: a plain split still shows the shape
        words = line.split()
    return json.dumps(words or ["python", "train.py"], ensure_ascii=False)


def first_date(value: Any) -> dt.date | dt.time | None:
    """The first TOML date or time inside ``value``, or None.

    Job IDs, Celery messages and published host policies are JSON, which has no dates.
    """
    if isinstance(value, (dt.date, dt.time)):  # datetime is a date too
        return value
    inner = value.values() if isinstance(value, dict) else value if isinstance(value, list) else ()
    return next((d for d in map(first_date, inner) if d is not None), None)


def date_problem(value: Any) -> tuple[str, str] | None:
    """(message, fix) when ``value`` holds a TOML date or time, else None."""
    d = first_date(value)
    if d is None:
        return None
    return (
        f"TOML dates and times are not supported, got {d.isoformat()}",
        f'use a string, e.g. "{d.isoformat()}"',
    )


def non_negative(p: Problems, path: tuple, table: dict, keys) -> None:
    for key in keys:
        if key in table and table[key] < 0:
            p.add(path + (key,), f"must be >= 0, got {table[key]}", "use 0 or a positive number")


def check_needs(p: Problems, path: tuple, table: dict) -> None:
    """Needs must be >= 0, and under the bound no host exceeds: a larger one is a typo
    (a unit slip, a stray exponent) that would otherwise name a queue no host ever serves."""
    non_negative(p, path, table, NEED_BOUNDS)
    for key, (bound, what, unit) in NEED_BOUNDS.items():
        if key in table and table[key] > bound:
            # 1e+308, not 308 digits
            shown = f"{table[key]:g}" if isinstance(table[key], float) else table[key]
            p.add(
                path + (key,),
                f"{shown} is above {bound} {what}, more than any host has",
                f"write it in {unit}, at most {bound}",
            )


def needs_cuda(t: dict) -> bool:
    """Whether well-typed job table ``t`` needs CUDA: said so, or asks for GPUs or VRAM (a
    prefer_cuda job asks for them on its GPU tier only, and may fall back to a CPU)."""
    asks_gpu = int(t.get("gpus", 0)) > 0 or t.get("min_vram_gib", 0) > 0
    return bool(t.get("require_cuda", False)) or (asks_gpu and not t.get("prefer_cuda"))


def read_needs(t: dict) -> Needs:
    """The needs (or a tier's floor) written in well-typed table ``t``; 0 where left out."""
    return Needs(
        needs_cuda(t),
        float(t.get("min_vram_gib", 0)),
        float(t.get("min_ram_gib", 0)),
        int(t.get("min_cores", 0)),
        int(t.get("gpus", 0)),
        bool(t.get("share_gpu", False)),
    )
