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

Path = tuple


def _split(dotted: str) -> tuple[str, ...]:
    return tuple(p.strip().strip("\"'") for p in dotted.split("."))


class LineMap:
    """Key path (e.g. ``("jobs", 2, "hyper", "lr")``) -> 1-based line number."""

    def __init__(self, text: str):
        self._lines: dict[tuple, int] = {}
        counters: dict[str, int] = {}
        header: tuple = ()
        in_multiline = False
        for n, raw in enumerate(text.splitlines(), start=1):
            line = raw.split("#", 1)[0] if '"' not in raw and "'" not in raw else raw
            if in_multiline:
                in_multiline = line.count("[") >= line.count("]") and "]" not in line
                continue
            if m := _ARRAY.match(line):
                name = _split(m.group(1))
                idx = counters[name[0]] = counters.get(name[0], -1) + 1
                header = (name[0], idx) + name[1:]
                self._lines.setdefault(header, n)
            elif m := _TABLE.match(line):
                name = _split(m.group(1))
                if name[0] in counters:  # [jobs.sweep] belongs to the latest [[jobs]]
                    name = (name[0], counters[name[0]]) + name[1:]
                header = name
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
