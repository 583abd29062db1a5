"""Tests wait on a condition, never on a fixed sleep: ``wait_until``."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")
POLL_S = 0.1  # how often a condition is looked at


def wait_until(
    what: str,
    check: Callable[[], T],
    timeout_s: float = 30.0,
    detail: Callable[[], str] = lambda: "",
    every_s: float = POLL_S,
    ignoring: tuple[type[BaseException], ...] = (),
) -> T:
    """The first truthy value of ``check()``, polled every ``every_s``; after ``timeout_s`` an
    AssertionError says ``what`` never happened, its last value, and ``detail()`` (logs).
    An error of a type in ``ignoring`` (a server the test restarts) counts as not yet."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            got = check()
        except ignoring as e:  # not yet; the timeout's message shows it as the last value
            got = e
        else:
            if got:
                return got
        if time.monotonic() >= deadline:
            raise AssertionError(f"{what}: not within {timeout_s:g} s (last: {got!r})\n{detail()}")
        time.sleep(every_s)
