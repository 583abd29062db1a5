"""Which processes of a /proc snapshot belong to a run and are still to kill
(tasks.runscope.doomed), by table, with no process started."""

from __future__ import annotations

import pytest

from tasks.runscope import Proc, doomed, of_run


def procs(*rows) -> dict:
    """(pid, ppid, state, marked) rows; every process started at tick 100."""
    return {pid: Proc(ppid, state, 100, marked) for pid, ppid, state, marked in rows}


WORKER = (10, 1, "S", False)
SUPERVISOR = (20, 10, "S", True)
JOB = (21, 20, "S", True)
DAEMON = (30, 1, "S", True)  # setsid'd and re-parented to init: found by its mark
CLEARED = (31, 30, "S", False)  # a child that cleared its environment: found by its parent
STRANGER = (40, 1, "S", False)


@pytest.mark.parametrize(
    "rows, seen, spare, expected",
    [
        ((WORKER, SUPERVISOR, JOB, STRANGER), set(), frozenset(), {20, 21}),
        ((WORKER, DAEMON, CLEARED, STRANGER), set(), frozenset(), {30, 31}),
        # the supervisor scanning spares itself
        ((SUPERVISOR, JOB, DAEMON), set(), frozenset({20}), {21, 30}),
        # a zombie holds nothing: not killed again, not waited for
        ((WORKER, (21, 20, "Z", False), DAEMON), set(), frozenset(), {30}),
        # killed, on its way out with its environment already gone: still waited for
        ((WORKER, (30, 1, "R", False)), {(30, 100)}, frozenset(), {30}),
        # the same pid reused by another process since: not the run's
        ((WORKER, (30, 1, "S", False)), {(30, 99)}, frozenset(), set()),
        # a dead (zombie) parent that was the run's still leads to its unmarked child
        (((30, 1, "Z", False), CLEARED), {(30, 100)}, frozenset(), {31}),
        ((WORKER, STRANGER), set(), frozenset(), set()),
    ],
)
def test_the_runs_processes_to_kill_are_the_marked_the_killed_and_their_descendants(
    rows, seen, spare, expected
):
    assert doomed(procs(*rows), seen, spare) == expected


def test_a_runs_processes_include_descendants_at_any_depth_but_not_their_parents():
    snap = procs(WORKER, (50, 10, "S", True), (51, 50, "S", False), (52, 51, "S", False))
    assert of_run(snap, set()) == {50, 51, 52}
