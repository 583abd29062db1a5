"""Map TOML key paths to the line they are written on (tomllib keeps no positions).

A light scan, good for the manifests people write: table headers, ``[[jobs]]`` entries
(numbered from 0), ``key = value`` lines and the keys of one-line inline tables.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_ARRAY = re.compile(r"^\s*\[\[\s*([^\]]+?)\s*\]\]")
_TABLE = re.compile(r"^\s*\[\s*([^\]]+?)\s*\]")
_KEY = re.compile(r"^\s*([A-Za-z0-9_\-\.\"' ]+?)\s*=(.*)$")
_INLINE_KEY = re.compile(r"[{,]\s*([A-Za-z0-9_\-\"']+)\s*=")
_PART = re.compile(r"\"[^\"]*\"|'[^']*'|[^.]+")  # one part of a dotted key; quotes may hold dots

Path = tuple
MAX_PARENTS = 24  # ancestors of a dotted name that get its line


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
        inside = scan(text).continued  # lines inside a multi-line array or string
        for n, raw in enumerate(text.splitlines(), start=1):
            line = raw.split("#", 1)[0] if '"' not in raw and "'" not in raw else raw
            if n in inside:
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
                self._parents(header, n)  # [colour.x] also writes the table colour
            elif m := _KEY.match(line):
                path = header + _split(m.group(1))
                self._parents(path, n)  # colour.x = 1 also writes the table colour
                rest = m.group(2)
                for k in _INLINE_KEY.findall(rest):
                    self._lines.setdefault(path + (k.strip("\"'"),), n)

    def _parents(self, path: tuple, n: int) -> None:
        """Line ``n`` for ``path`` and for each ancestor not written before (a dotted name
        creates them); only the first few levels: deeper ones never carry a problem."""
        for depth in range(1, min(len(path), MAX_PARENTS) + 1):
            self._lines.setdefault(path[:depth], n)
        self._lines.setdefault(path, n)

    def line(self, *path) -> int | None:
        """The line of ``path``, or of its nearest written ancestor."""
        path = tuple(path)
        while path:
            if path in self._lines:
                return self._lines[path]
            path = path[:-1]
        return None


@dataclass(frozen=True)
class Opening:
    """Where a bracket or string was opened: what it is and its 1-based line."""

    kind: str  # array, inline table, multi-line string
    line: int


@dataclass(frozen=True)
class Scan:
    """What a bracket scan of TOML text found."""

    unclosed: Opening | None  # the innermost construct still open at the end of the text
    outer: Opening | None  # the outermost one, when more than one is open
    too_deep: int | None  # the first line where brackets nest deeper than the limit
    continued: frozenset[int]  # lines that begin inside an array, inline table or string


_KINDS = {"[": "array", "{": "inline table"}
_TOKEN = re.compile(r'#[^\n]*|"""|' + r"'''" + r"""|["'\[\]{}\n]""")
_STRING = {  # a whole string from its opening quote; a one-line string cannot span lines
    '"""': re.compile(r'"""(?:[^"\\]|\\.|"(?!""))*""""{0,2}', re.S),
    "'''": re.compile(r"'''(?:[^']|'(?!''))*''''{0,2}", re.S),
    '"': re.compile(r'"(?:[^"\\\n]|\\.)*"'),
    "'": re.compile(r"'[^'\n]*'"),
}


def scan(text: str, max_depth: int = 1_000_000) -> Scan:
    """Brackets and strings of TOML ``text``, for what tomllib reports without a line.

    tomllib says "Unclosed array (at end of document)", and recurses until Python's limit
    on deep nesting; this says where the construct began. Comments and strings are
    skipped, so a ``[`` inside a string does not count. A regex jumps between the
    characters that matter, so a 100,000-value array costs next to nothing.
    """
    stack: list[Opening] = []
    continued: set[int] = set()
    deep, line, pos = None, 1, 0
    while m := _TOKEN.search(text, pos):
        tok, pos = m.group(), m.end()
        if tok == "\n":
            line += 1
            if stack:
                continued.add(line)
        elif tok[0] in "\"'":
            whole = _STRING[tok].match(text, m.start())
            if whole is None and len(tok) == 3:
                return Scan(
                    Opening("multi-line string", line),
                    stack[0] if stack else None,
                    deep,
                    frozenset(continued),
                )
            if whole is None:  # cut by its line's end: tomllib names that line itself
                continue
            lines = text.count("\n", whole.start(), whole.end())
            continued.update(range(line + 1, line + lines + 1))
            line, pos = line + lines, whole.end()
        elif tok in "[{":
            stack.append(Opening(_KINDS[tok], line))
            if deep is None and len(stack) > max_depth:
                deep = line
        elif tok in "]}" and stack:
            stack.pop()
    return Scan(
        stack[-1] if stack else None,
        stack[0] if len(stack) > 1 else None,
        deep,
        frozenset(continued),
    )
