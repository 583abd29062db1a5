"""Timing helper shared by the benches."""
from __future__ import annotations

import time


def best_of(runs: int, fn, setup=lambda: None) -> tuple[float, object]:
    """The fastest of ``runs`` calls of ``fn`` (``setup`` runs untimed before each), and its result."""
    best, result = float("inf"), None
    for _ in range(runs):
        setup()
        start = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - start)
    return best, result
