"""What to do with a bundle a run staged and left (``Store.staged``): a pure decision.

A run stages its bundle under its own token and promotes it once the job's record names it
(``tasks.upload``); a run that lost its job discards it. A run that died in between leaves
it staged, and the sweep (``tasks.strays``) finishes the step its run could not: it promotes
a bundle the record names, and deletes one no record names once its run has had
``grace_s`` to commit it (longer than any stage-to-record wait, Redis retries included).
"""

from __future__ import annotations

from enum import Enum

from artifacts.stores import StagedBundle


class Verdict(str, Enum):
    PROMOTE = "promote"  # the job's record names it: its run was recorded, then died
    DISCARD = "discard"  # no record names it and its run had time enough: a stray
    KEEP = "keep"  # its run may still be recorded


def verdict(
    staged: StagedBundle, recorded_sha256: str | None, now: float, grace_s: float
) -> Verdict:
    """``recorded_sha256``: the bundle the job's record names (None: none, or no record)."""
    if recorded_sha256 is not None and recorded_sha256 == staged.sha256:
        return Verdict.PROMOTE
    if staged.staged_at is None or now - staged.staged_at >= grace_s:
        return Verdict.DISCARD
    return Verdict.KEEP
