"""Helpers shared by the benches: timing, and the smoke mode CI runs every bench in."""

from __future__ import annotations

import argparse
import os
import time

SMOKE_ENV = "FLEET_BENCH_SMOKE"  # "1": every bench runs its smoke sizes, as with --smoke


def best_of(runs: int, fn, setup=lambda: None) -> tuple[float, object]:
    """The fastest of ``runs`` calls of ``fn``, and its result.

    ``setup`` runs untimed before each call.
    """
    best, result = float("inf"), None
    for _ in range(runs):
        setup()
        start = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - start)
    return best, result


def parse_args(parser: argparse.ArgumentParser, **smoke) -> argparse.Namespace:
    """``parser``'s arguments, with a ``--smoke`` flag: it (or FLEET_BENCH_SMOKE=1) makes
    ``smoke`` the defaults, tiny sizes that run the whole bench in a few seconds so a bench
    that breaks fails CI (tests/integration/test_benches.py). Options given still win; the
    figures of a smoke run mean nothing."""
    parser.add_argument(
        "--smoke",
        action="store_true",
        default=os.environ.get(SMOKE_ENV) == "1",
        help=f"tiny sizes, a few seconds: checks the bench runs ({SMOKE_ENV}=1 too)",
    )
    args = parser.parse_args()
    if args.smoke:
        parser.set_defaults(**smoke)
        args = parser.parse_args()
    return args
