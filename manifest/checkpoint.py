"""A job's ``checkpoint`` directory: a relative path inside its work dir (pure checks)."""

from __future__ import annotations

from pathlib import PurePosixPath

# what the worker itself writes in a job's work dir: a checkpoint may not be one of them
RESERVED = ("out", "job.json", "fleet-log.txt", ".fleet-exit.json")


def checkpoint_problem(value: str) -> tuple[str, str] | None:
    """(message, fix) when ``value`` cannot be a checkpoint dir, else None."""
    fix = 'use a relative folder inside the job\'s work dir, e.g. checkpoint = "ckpt/"'
    if not value.strip():
        return "checkpoint is empty", fix
    path = PurePosixPath(value)
    if path.is_absolute() or value.startswith("~") or "\\" in value:
        return f"checkpoint {value!r} must be relative to the job's work dir", fix
    parts = [p for p in path.parts if p != "."]
    if not parts or ".." in parts:
        return f"checkpoint {value!r} must stay inside the job's work dir", fix
    if parts[0] in RESERVED:
        return (
            f"checkpoint {value!r} is inside {parts[0]!r}, which the worker writes itself",
            'name another folder, e.g. checkpoint = "ckpt/"',
        )
    return None


def checkpoint_dir(value: str) -> str:
    """The normal form of a valid checkpoint dir: ``"./ckpt/"`` -> ``"ckpt"``."""
    return PurePosixPath(*[p for p in PurePosixPath(value).parts if p != "."]).as_posix()
