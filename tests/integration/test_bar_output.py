"""The runner reads a job's output as a terminal shows it: every metric line printed beside a
real tqdm bar in a pipe, a bar's last state in the tail, and a line with no end in bounded
memory."""

import sys
import threading
import tracemalloc
from pathlib import Path

from tasks import runner
from trainers import protocol as P

BARJOB = str(Path(__file__).parents[1] / "e2e" / "barjob.py")


def run(*args: str, **kw) -> runner.RunOutcome:
    return runner.run(
        [sys.executable, BARJOB, *args],
        env={"PATH": "/usr/bin:/bin", "PYTHONUNBUFFERED": "1"},  # as a worker sets it
        cwd="/tmp",
        timeout_s=120,
        on_tick=lambda p: None,
        stop=threading.Event(),
        tick_s=0.2,
        **kw,
    )


def test_every_metric_line_beside_a_tqdm_bar_is_read_and_the_tail_shows_each_bars_last_state():
    points, logged = [], []
    out = run("bar", "7", on_metric=points.append, log=logged.append)
    assert out.returncode == 0, out.tail
    assert [p.step for p in points] == list(range(7)) and not out.bad_lines
    assert out.metrics == {"epoch": 6, "loss": 1 / 7}
    assert all("\r" not in line for line in logged)
    ends = [line for line in logged if "20/20" in line]
    assert len(ends) == 7 and all("100%|" in line for line in ends), logged
    assert all(" 0%|" not in line for line in logged), logged  # never a bar's first state
    assert sum(P.METRIC_PREFIX in line for line in logged) == 7


def test_a_line_of_many_mebibytes_with_no_break_is_read_in_bounded_memory():
    points = []
    tracemalloc.start()
    try:
        out = run("long", "40", on_metric=points.append)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert out.returncode == 0 and [p.values for p in points] == [{"epoch": 0, "loss": 1.0}]
    assert peak < 4 << 20, f"the reader held {peak} bytes"
    assert all(len(line) <= P.MAX_OUTPUT_LINE_CHARS for line in out.tail)
    assert out.tail[-1].endswith(f"[cut: the line had {1 << 20} bytes]")
