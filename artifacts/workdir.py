"""Which files of a job's ``workdir`` travel with it: its code, not its clutter.

Honours ``.gitignore`` files (at any depth, each for the folder it sits in) and a
``.fleetignore`` at the top (gitignore syntax, read by ``pathspec``), and always leaves out
``.git/``, virtual environments (any folder holding a ``pyvenv.cfg``), ``__pycache__/`` and
compiled ``*.pyc``. Symbolic links are not followed (they could name bytes outside the
tree). The selection is sorted, so the same tree gives the same tar and digest anywhere.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

import pathspec

from core.errors import DataProblem
from core.registry import FLEET_WORKDIR_MAX_MIB

IGNORE_FILES = (".gitignore",)
FLEETIGNORE = ".fleetignore"  # top level only: what the publisher wants left behind
ALWAYS_LEFT_OUT = (
    ".git/",
    "__pycache__/",
    "*.pyc",
    ".venv/",
    ".tox/",
    ".mypy_cache/",
    ".pytest_cache/",
    ".ipynb_checkpoints/",
)
LARGEST_SHOWN = 5


@dataclass(frozen=True)
class Selection:
    """The files of a workdir that travel, as sorted (posix relative path, path) pairs."""

    root: Path
    files: tuple[tuple[str, Path], ...]
    sizes: tuple[int, ...]

    @property
    def total_bytes(self) -> int:
        return sum(self.sizes)

    def largest(self, n: int = LARGEST_SHOWN) -> list[tuple[str, int]]:
        pairs = sorted(
            zip((rel for rel, _ in self.files), self.sizes, strict=True),
            key=lambda p: (-p[1], p[0]),
        )
        return pairs[:n]


def _spec(lines: list[str]) -> pathspec.PathSpec:
    return pathspec.GitIgnoreSpec.from_lines(lines)


def _read_lines(path: Path) -> list[str]:
    try:
        return path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return []


def _ignored(stack: list[tuple[str, pathspec.PathSpec]], rel: str, is_dir: bool) -> bool:
    """Whether any spec in force (each relative to its own folder) leaves ``rel`` out."""
    for base, spec in stack:
        sub = rel[len(base) + 1 :] if base else rel
        if spec.match_file(sub + "/" if is_dir else sub):
            return True
    return False


def _entered(parent: list, rel: str, folder: Path) -> list:
    """The specs in force inside ``folder``: its parent's plus its own .gitignore."""
    stack = list(parent)
    for name in IGNORE_FILES:
        lines = _read_lines(folder / name)
        if lines:
            stack.append((rel, _spec(lines)))
    return stack


def select(root: Path, leave_out: Iterable[Path] = ()) -> Selection:
    """The files under ``root`` that travel with the job; never those of ``leave_out`` (the
    manifest being published: editing it must not change its own job's content)."""
    root = Path(root)
    left = {Path(p).relative_to(root).as_posix() for p in leave_out if Path(p).is_relative_to(root)}
    top = [("", _spec(list(ALWAYS_LEFT_OUT) + _read_lines(root / FLEETIGNORE)))]
    found: list[tuple[str, Path, int]] = []
    stacks = {"": _entered(top, "", root)}
    for dirpath, dirnames, filenames in os.walk(root):
        rel_dir = Path(dirpath).relative_to(root).as_posix()
        rel_dir = "" if rel_dir == "." else rel_dir
        stack = stacks.pop(rel_dir)
        keep = []
        for name in sorted(dirnames):
            rel = f"{rel_dir}/{name}" if rel_dir else name
            folder = Path(dirpath, name)
            if (
                folder.is_symlink()
                or (folder / "pyvenv.cfg").exists()
                or _ignored(stack, rel, True)
            ):
                continue
            keep.append(name)
            stacks[rel] = _entered(stack, rel, folder)
        dirnames[:] = keep
        for name in filenames:
            rel = f"{rel_dir}/{name}" if rel_dir else name
            st = Path(dirpath, name).lstat()
            if stat.S_ISREG(st.st_mode) and rel not in left and not _ignored(stack, rel, False):
                found.append((rel, Path(dirpath, name), st.st_size))
    found.sort()
    return Selection(root, tuple((rel, p) for rel, p, _ in found), tuple(s for _, _, s in found))


def max_bytes(env: Mapping[str, str] | None = None) -> int:
    """The workdir bound from FLEET_WORKDIR_MAX_MIB (MiB); a bad value is a ConfigError."""
    return int(FLEET_WORKDIR_MAX_MIB.value(env) * (1 << 20))


def check_size(sel: Selection, limit: int) -> None:
    """Refuse a workdir over ``limit`` bytes, naming its largest files."""
    if sel.total_bytes <= limit:
        return
    biggest = ", ".join(f"{rel} ({_mib(size)})" for rel, size in sel.largest())
    raise DataProblem(
        f"workdir {str(sel.root)!r} is {_mib(sel.total_bytes)}, over the "
        f"{_mib(limit)} limit; largest files: {biggest}",
        f"leave data and environments out with a {FLEETIGNORE} (gitignore syntax) "
        f"and ship data with `data = ...`, or raise {FLEET_WORKDIR_MAX_MIB.name}",
    )


def _mib(n: int) -> str:
    return f"{n / (1 << 20):.1f} MiB"
