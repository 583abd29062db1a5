"""Manifest text to a TOML document, or one problem naming the line: unreadable files,
syntax errors (even those tomllib reports without a line) and nesting too deep to check."""

from __future__ import annotations

import os
import re
import tomllib
from typing import Any

from core.errors import ManifestError, Problem
from manifest.lines import LineMap, scan
from manifest.problems import field_name

# tables and arrays inside one another: far more than a manifest needs, far less than
# Python's recursion limit (tomllib and the checks recurse once per level)
MAX_NESTING = 32
NESTING_FIX = f"flatten it: a manifest needs a few levels, at most {MAX_NESTING}"
CLOSERS = {
    "array": "]",
    "inline table": "}",
    "string": "a matching quote (\" or ')",
    "multi-line string": "a matching \"\"\" or '''",
}
SYNTAX = "(syntax)"
FILE = "(file)"


def read_text(path: str | os.PathLike) -> str:
    """The file's text; a ManifestError when it cannot be read or is not UTF-8."""
    path = str(path)
    try:
        with open(path, "rb") as f:
            return f.read().decode("utf-8")
    except OSError as e:
        raise ManifestError(
            [Problem(path, None, FILE, f"cannot read: {e.strerror}", "check the path")]
        ) from e
    except UnicodeDecodeError as e:  # TOML is UTF-8 by definition
        raise ManifestError(
            [
                Problem(
                    path,
                    None,
                    FILE,
                    f"not UTF-8 text: {e.reason} at byte {e.start}",
                    "save the file as UTF-8",
                )
            ]
        ) from e


def parse(text: str, path: str, lines: LineMap) -> dict:
    """tomllib's document, bounded in depth; a ManifestError that names the line otherwise."""
    doc = _toml(text, path)
    if deep := too_deep(doc, MAX_NESTING):
        raise ManifestError(
            [
                Problem(
                    path,
                    lines.line(*deep),
                    field_name(deep[:8]) + "...",
                    f"nested more than {MAX_NESTING} levels deep",
                    NESTING_FIX,
                )
            ]
        )
    return doc


def _toml(text: str, path: str) -> dict:
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        m = re.search(r"line (\d+)", str(e))
        if m:
            raise ManifestError(
                [
                    Problem(
                        path,
                        int(m.group(1)),
                        SYNTAX,
                        f"not valid TOML: {e}",
                        "fix the TOML syntax at that line",
                    )
                ]
            ) from e
        raise ManifestError([unclosed_problem(path, text, e)]) from e
    except RecursionError as e:  # tomllib recurses once per nesting level
        line = scan(text, MAX_NESTING).too_deep
        raise ManifestError(
            [
                Problem(
                    path, line, SYNTAX, f"nested more than {MAX_NESTING} levels deep", NESTING_FIX
                )
            ]
        ) from e


def unclosed_problem(path: str, text: str, e: Exception) -> Problem:
    """At the end of the text tomllib names no line: name the one where the open construct began."""
    found = scan(text)
    if found.unclosed is None:
        return Problem(path, None, SYNTAX, f"not valid TOML: {e}", "fix the TOML syntax")
    what = found.unclosed
    where = (
        f"; it is inside the {found.outer.kind} opened at line {found.outer.line}"
        if found.outer
        else ""
    )
    return Problem(
        path,
        what.line,
        SYNTAX,
        f"not valid TOML: {e}: the {what.kind} opened at line {what.line} is never closed{where}",
        f"close it with {CLOSERS[what.kind]}",
    )


def too_deep(doc: dict, limit: int) -> tuple | None:
    """The key path of the first value nested more than ``limit`` tables or arrays deep.

    Iterative: later checks (and JSON) recurse over values, so the depth is bounded first.
    """
    todo: list[tuple[tuple, Any]] = [((), doc)]
    while todo:
        path, value = todo.pop()
        if len(path) > limit:
            return path[: limit + 1]
        if isinstance(value, dict):
            todo.extend((path + (k,), v) for k, v in value.items())
        elif isinstance(value, list):
            todo.extend(
                (path + (i,), v) for i, v in enumerate(value) if isinstance(v, (dict, list))
            )
    return None
