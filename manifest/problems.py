"""The problems of one manifest, each at its file, line and field path, with a fix.

A check reports by key path (``("jobs", 2, "hyper", "lr")``); the collector turns the path
into the line it is written on and the field name people read (``jobs[2].hyper.lr``).
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable

from core.errors import ManifestError, Problem
from manifest.lines import LineMap


def field_name(path: tuple) -> str:
    """``("jobs", 2, "hyper", "lr")`` -> ``jobs[2].hyper.lr``."""
    out = ""
    for p in path:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out


# names people write for a job's needs, from other schedulers and from plain English;
# spelling distance alone would turn "needs" into "seed"
ALIASES = {
    "cuda": "require_cuda",
    "gpu": "gpus",
    "num_gpus": "gpus",
    "gpu_count": "gpus",
    "vram": "min_vram_gib",
    "vram_gib": "min_vram_gib",
    "gpu_memory": "min_vram_gib",
    "ram": "min_ram_gib",
    "ram_gib": "min_ram_gib",
    "memory": "min_ram_gib",
    "mem": "min_ram_gib",
    "cores": "min_cores",
    "cpus": "min_cores",
    "cpu": "min_cores",
    "threads": "min_cores",
    "host": "allowed_hosts",
    "hosts": "allowed_hosts",
    "nodes": "allowed_hosts",
    "timeout": "timeout_s",
    "retries": "max_attempts",
    # Ray's PBT arguments, where fleet's scheduler table names them shorter
    "perturbation_interval": "interval",
    "quantile_fraction": "quantile",
}
NEEDS_TABLES = frozenset({"needs", "requires", "require", "resources"})


def suggest(key: str, known: Iterable[str]) -> str:
    """A fix for an unknown name: the name it most likely meant, or the list of them."""
    known = list(known)
    if key in NEEDS_TABLES and "require_cuda" in known:
        return (
            "a job's needs are keys of the job itself, not a table: write require_cuda, gpus, "
            "min_vram_gib, min_ram_gib, min_cores or allowed_hosts directly under [[jobs]]"
        )
    if ALIASES.get(key) in known:
        return f"did you mean '{ALIASES[key]}'?"
    close = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
    if close:
        return f"did you mean '{close[0]}'?"
    return "known keys: " + ", ".join(sorted(known))


class Problems:
    """Collects the problems of one file, resolving each key path to its line."""

    def __init__(self, file: str, lines: LineMap):
        self.file, self.lines = file, lines
        self.items: list[Problem] = []
        self.paths: list[tuple] = []  # the key path of each item, for checks that depend on others

    def add(self, path: tuple, message: str, fix: str = "") -> None:
        self.items.append(
            Problem(self.file, self.lines.line(*path), field_name(path), message, fix)
        )
        self.paths.append(path)

    def since(self, mark: int) -> list[tuple]:
        """Key paths of the problems added after ``len(self.paths)`` was ``mark``."""
        return self.paths[mark:]

    def raise_any(self) -> None:
        """Raise every problem at once, in file order (those without a line last)."""
        if self.items:
            raise ManifestError(sorted(self.items, key=lambda x: (x.line is None, x.line or 0)))
