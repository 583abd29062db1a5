"""A job held on a file its test creates: ``held(PATH)`` returns once PATH exists.

A test that must see a job running (to look at it, kill it or preempt it) holds the job on a
condition it sets itself, not on a length that a busy machine eats. The job goes on after
``LIMIT_S`` anyway, so a test that fails before it opens the gate leaves nothing running.
Imported by the job scripts beside it (a script's own folder is on its path).
"""

import pathlib
import time

LIMIT_S = 180.0  # a test that never opens the gate: the job ends on its own after this
POLL_S = 0.1


def held(gate: str) -> None:
    """Wait until the file ``gate`` exists, or LIMIT_S passed."""
    path, deadline = pathlib.Path(gate), time.monotonic() + LIMIT_S
    while not path.exists() and time.monotonic() < deadline:
        time.sleep(POLL_S)
