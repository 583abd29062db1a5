"""Map TOML key paths to the line they are written on (tomllib keeps no positions).

A light scan, good for the manifests people write: table headers, ``[[jobs]]`` entries
(numbered from 0), ``key = value`` lines and the keys of one-line inline tables.
"""
from __future__ import annotations

import re

_ARRAY = re.compile(r"^\s*\[\[\s*([^\]]+?)\s*\]\]")
_TABLE = re.compile(r"^\s*\[\s*([^\]]+?)\s*\]")
_KEY = re.compile(r"^\s*([A-Za-z0-9_\-\.\"' ]+?)\s*=(.*)$")
_INLINE_KEY = re.compile(r"[{,]\s*([A-Za-z0-9_\-\"']+)\s*=")
_PART = re.compile(r"\"[^\"]*\"|'[^']*'|[^.]+")  # one part of a dotted key; quotes may hold dots

Path = tuple


def _split(dotted: str) -> tuple[str, ...]:
    # a quoted part may hold dots: [tiers."gpu.big"] is one key, not two
    return tuple(p.strip().strip("\"'") for p in _PART.findall(dotted) if p.strip())


def _resolve(name: tuple, counters: dict[tuple, int]) -> tuple:
    """Insert the latest index after each array-of-tables prefix: jobs.sweep -> jobs, 2, sweep."""
    out: tuple = ()
    for part in name:
        out += (part,)
        if out in counters:
            out += (counters[out],)
    return out


class LineMap:
    """Key path (e.g. ``("jobs", 2, "hyper", "lr")``) -> 1-based line number."""

    def __init__(self, text: str):
        self._lines: dict[tuple, int] = {}
        counters: dict[tuple, int] = {}  # array-of-tables path -> latest index
        header: tuple = ()
        in_multiline = False
        for n, raw in enumerate(text.splitlines(), start=1):
            line = raw.split("#", 1)[0] if '"' not in raw and "'" not in raw else raw
            if in_multiline:
                in_multiline = line.count("[") >= line.count("]") and "]" not in line
                continue
            if m := _ARRAY.match(line):
                name = _split(m.group(1))
                key = _resolve(name[:-1], counters) + name[-1:]
                idx = counters[key] = counters.get(key, -1) + 1
                header = key + (idx,)
                self._lines.setdefault(key, n)  # the array itself: its first entry
                self._lines.setdefault(header, n)
            elif m := _TABLE.match(line):
                header = _resolve(_split(m.group(1)), counters)  # [jobs.sweep]: the latest [[jobs]]
                self._lines.setdefault(header, n)
            elif m := _KEY.match(line):
                path = header + _split(m.group(1))
                self._lines.setdefault(path, n)
                rest = m.group(2)
                for k in _INLINE_KEY.findall(rest):
                    self._lines.setdefault(path + (k.strip("\"'"),), n)
                in_multiline = rest.strip().startswith("[") and rest.count("[") > rest.count("]")

    def line(self, *path) -> int | None:
        """The line of ``path``, or of its nearest written ancestor."""
        path = tuple(path)
        while path:
            if path in self._lines:
                return self._lines[path]
            path = path[:-1]
        return None
